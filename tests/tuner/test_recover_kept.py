"""Red team M1: a torn journal line after a ``kept`` change made ``recover`` put the kept
settings (a confirmed winner left on the canary) back to the entry's baseline. The last known
state of a kept change is its settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from safety.journal import Journal
from tests.conftest import record_study
from tuner.cli import main
from tuner.cluster import build_cluster
from tuner.cluster.statefile import read_state
from tuner.experiment import Experiment
from tuner.settings import Settings


def test_a_torn_line_after_a_kept_change_keeps_the_kept_settings(
        tiny: Callable[..., tuple[Experiment, str]], tmp_path: Path) -> None:
    exp, text = tiny()
    f = tmp_path / "tiny.yaml"
    f.write_text(text)
    journal = Journal(exp.results_path / "journal.jsonl")
    with build_cluster(exp) as cluster:  # what `run` does when it keeps a winner
        desc = cluster.describe()
        base = cluster.snapshot()
        won = Settings.uniform(desc.canary_switches, desc.canary_nics,
                               base.flat() | {"kmin_bytes": 40_000, "kmax_bytes": 400_000})
        record_study(exp.storage_url, "tiny", base)
        entry = journal.begin("tiny", 3, won.targets(), base, won)
        cluster.apply(won)
        journal.end(entry, "applied")
        journal.end(entry, "kept")
    with (exp.results_path / "journal.jsonl").open("ab") as fh:
        fh.write(b'{"kind": "begin", "id": "torn')  # the next record, cut by a crash
    r = CliRunner().invoke(main, ["recover", str(f)])
    assert r.exit_code == 0, r.output
    assert "its kept settings" in r.output and "kept settings restored and verified" in r.output
    # What the simulated devices hold after recover (the state file it writes through).
    assert read_state(exp.results_path / "sim-state.json") == won  # not the baseline
