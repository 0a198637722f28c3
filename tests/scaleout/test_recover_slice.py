"""``ecntune recover EXPERIMENT --slice NAME``: a worker died with a change open on its slice;
recover finds the slice's journal, builds that slice's canary and restores it (verified)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from safety.journal import Journal
from tests.scaleout.test_slices import exp_with
from tuner.cli import main
from tuner.cluster import build_cluster
from tuner.cluster.statefile import read_state
from tuner.slices import for_slice


def test_recover_restores_the_slice_a_dead_worker_left_dirty(tmp_path: Path) -> None:
    exp = exp_with(tmp_path, "2")
    f = tmp_path / "e.yaml"
    f.write_text(exp.model_dump_json())  # JSON is YAML
    mine = for_slice(exp, "sim1")
    journal = Journal(mine.results_path / "journal.jsonl")
    with build_cluster(mine) as cluster:  # what a worker does up to its death mid-trial
        desc = cluster.describe()
        base = cluster.snapshot()
        trial = base.flat() | {"kmin_bytes": 40_000, "kmax_bytes": 400_000}
        from tuner.settings import Settings

        settings = Settings.uniform(desc.canary_switches, desc.canary_nics, trial)
        journal.begin("tiny", 7, settings.targets(), base, settings)
        cluster.apply(settings)
    state = mine.results_path / "sim-state.json"
    assert read_state(state) == settings and journal.dirty() is not None
    assert not (tmp_path / "res" / "slices" / "sim0").exists()  # the other slice: untouched

    r = CliRunner().invoke(main, ["recover", str(f), "--slice", "sim1"])
    assert r.exit_code == 0, r.output
    assert "study tiny trial 7:" in r.output and "baseline restored and verified" in r.output
    assert journal.dirty() is None
    assert read_state(state) == base
    r = CliRunner().invoke(main, ["recover", "--slice", "sim1"])
    assert r.exit_code == 2 and "pass the experiment file" in r.output
