"""Red team H2, the forged baseline: a ``begin`` record with a valid CRC (a CRC is not a
signature) and a baseline of the attacker's choosing, appended to a finished study's journal,
was applied by ``recover``, which reported "baseline restored and verified". A journal record's
baseline must be the snapshot its study recorded in the Optuna storage before its first
change."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from safety.journal import Journal
from tuner import optuna_io, study_store
from tuner.cli import main
from tuner.cluster.statefile import read_state
from tuner.experiment import Experiment
from tuner.settings import Settings


def test_a_forged_baseline_is_refused_and_nothing_applied(
        tiny: Callable[..., tuple[Experiment, str]], tmp_path: Path) -> None:
    exp, text = tiny(trials=1, confirm=0)
    f = tmp_path / "tiny.yaml"
    f.write_text(text)
    r = CliRunner().invoke(main, ["run", str(f), "--study", "s1", "--quiet"])
    assert r.exit_code == 0, r.output
    state = exp.results_path / "sim-state.json"
    found = read_state(state)
    recorded = study_store.snapshot(optuna_io.load_study("s1", exp.storage_url))
    assert recorded == found  # the canary is on the baseline the study recorded

    journal = Journal(exp.results_path / "journal.jsonl")
    forged = Settings.model_validate({"switches": {sw: {"kmin_bytes": 1000, "kmax_bytes": 2000}
                                                   for sw in found.switches}})
    for study in ("s1", "no-such-study"):  # the study's own name, and one no store holds
        entry = journal.begin(study, 99, forged.targets(), forged, forged)
        r = CliRunner().invoke(main, ["recover", str(f)])
        assert r.exit_code == 4, r.output
        assert "nothing was applied" in r.output and "restored" not in r.output, r.output
        if study == "s1":
            assert "its baseline is not the snapshot study 's1'" in r.output
            assert "kmin_bytes: journal 1000, study" in r.output
            # --trust-journal is for a lost store, never past a mismatch
            r = CliRunner().invoke(main, ["recover", str(f), "--trust-journal"])
            assert r.exit_code == 4 and "its baseline is not the snapshot" in r.output
        else:
            assert "no baseline snapshot of study 'no-such-study'" in r.output
        assert read_state(state) == found  # the canary untouched
        assert journal.dirty() is not None  # and the record still open
        journal.end(entry, "restored")  # what an operator does after checking by hand
