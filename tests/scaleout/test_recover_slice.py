"""``ecntune recover EXPERIMENT --slice NAME``: a worker died with a change open on its slice;
recover finds the slice's journal, builds that slice's canary and restores it (verified)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from safety.journal import Journal
from tests.conftest import record_study
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
        record_study(mine.storage_url, "tiny", base, "sim1")
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


def _dirty_slice(tmp_path: Path) -> tuple[Path, Journal, Path, object]:
    """A worker of slice sim1 killed mid-trial (its change open), as in the test above."""
    from tuner.settings import Settings

    tmp_path.mkdir(parents=True, exist_ok=True)
    exp = exp_with(tmp_path, "2")
    f = tmp_path / "e.yaml"
    f.write_text(exp.model_dump_json())
    mine = for_slice(exp, "sim1")
    journal = Journal(mine.results_path / "journal.jsonl")
    with build_cluster(mine) as cluster:
        desc = cluster.describe()
        base = cluster.snapshot()
        settings = Settings.uniform(desc.canary_switches, desc.canary_nics,
                                    base.flat() | {"kmin_bytes": 40_000, "kmax_bytes": 400_000})
        record_study(mine.storage_url, "tiny", base, "sim1")
        journal.begin("tiny", 7, settings.targets(), base, settings)
        cluster.apply(settings)
    return f, journal, mine.results_path / "sim-state.json", base


def test_every_form_of_recover_finds_a_dead_workers_slice(tmp_path: Path,
                                                         monkeypatch: Any) -> None:
    """Red team H1: ``recover EXPERIMENT`` and ``recover --results DIR`` said "no open change"
    while a slice's journal held one; only ``--slice`` found it."""
    f, journal, state, base = _dirty_slice(tmp_path)
    r = CliRunner().invoke(main, ["recover", str(f)])
    assert r.exit_code == 0, r.output
    assert "study tiny trial 7:" in r.output and "baseline restored and verified" in r.output
    assert journal.dirty() is None and read_state(state) == base

    f, journal, state, base = _dirty_slice(tmp_path / "b")
    r = CliRunner().invoke(main, ["recover", str(f), "--results", str(tmp_path / "b" / "res")])
    assert r.exit_code == 0, r.output
    assert journal.dirty() is None and read_state(state) == base

    # No argument: results/<study>/slices/*; without the experiment file (the study is in a
    # shared database the folder does not name) it must fail, naming what to pass, never say
    # there is no open change.
    f, journal, state, base = _dirty_slice(tmp_path / "c")
    monkeypatch.chdir(tmp_path / "c")
    (tmp_path / "c" / "res").rename(tmp_path / "c" / "results")
    r = CliRunner().invoke(main, ["recover"])
    assert r.exit_code != 0
    assert "slices/sim1/journal.jsonl" in r.output and "ecntune recover EXPERIMENT --slice sim1" \
        in r.output, r.output
    assert "no open change" not in r.output.replace("results/journal.jsonl does not exist", "")
    moved = Journal(tmp_path / "c" / "results" / "slices" / "sim1" / "journal.jsonl")
    assert moved.dirty() is not None  # nothing was done blind


def test_recover_without_arguments_finds_a_slice_of_a_study_folder(tmp_path: Path,
                                                                   monkeypatch: Any) -> None:
    """Red team H1 as they ran it: the worker's study folder is ``results/<study>/`` holding
    only ``slices/<name>/journal.jsonl``, beside another study whose journal is clean. A bare
    ``recover`` must not report the clean one and exit 0: it names the slice's journal."""
    from tuner.settings import Settings

    _dirty_slice(tmp_path / "d")
    monkeypatch.chdir(tmp_path / "d")
    (tmp_path / "d" / "results").mkdir()
    (tmp_path / "d" / "res").rename(tmp_path / "d" / "results" / "pod")
    clean = Journal(tmp_path / "d" / "results" / "other" / "journal.jsonl")
    entry = clean.begin("other", 1, [], Settings(), Settings())
    clean.end(entry, "restored")
    r = CliRunner().invoke(main, ["recover"])
    assert r.exit_code == 2, r.output
    assert "results/pod/slices/sim1/journal.jsonl" in r.output
    assert "ecntune recover EXPERIMENT --slice sim1" in r.output
    pod = Journal(tmp_path / "d" / "results" / "pod" / "slices" / "sim1" / "journal.jsonl")
    assert pod.dirty() is not None  # nothing was done blind
