"""Journal durability/recovery semantics and verified rollback."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.measurement import Counters, Measurement
from safety.journal import Journal
from safety.rollback import restore
from tuner.cluster.base import Cluster, ClusterDescription
from tuner.errors import ApplyError, RollbackError
from tuner.settings import Settings

BASE = Settings.uniform(["leaf0"], ["host0/mlx5_0"], {})
TRIAL = Settings.uniform(["leaf0"], ["host0/mlx5_0"], {"kmin_bytes": 50_000,
                                                      "kmax_bytes": 200_000,
                                                      "rpg_time_reset": 50})


def test_journal_open_change_is_dirty_until_restored(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j" / "journal.jsonl")
    assert j.dirty() is None
    eid = j.begin("s1", 3, BASE.targets(), BASE, TRIAL)
    assert j.dirty() is not None and j.dirty().settings == TRIAL  # type: ignore[union-attr]
    j.end(eid, "applied")
    assert j.dirty().id == eid  # type: ignore[union-attr]
    j.end(eid, "restored")
    assert j.dirty() is None
    # A torn last line (crash mid-write) is ignored, the rest survives.
    eid2 = j.begin("s1", 4, BASE.targets(), BASE, TRIAL)
    with open(j.path, "a") as fh:
        fh.write('{"event":"end","id":"')
    again = Journal(j.path)
    assert again.dirty().id == eid2 and again.dirty().baseline == BASE  # type: ignore[union-attr]
    assert [e.trial for e in again.entries()] == [3, 4]


class FlakyCluster(Cluster):
    """Holds settings in memory; the first ``fail`` applies raise, ``stuck`` ignores writes."""

    def __init__(self, fail: int = 0, stuck: bool = False) -> None:
        self.current, self.fail, self.stuck, self.applies = TRIAL, fail, stuck, 0

    def describe(self) -> ClusterDescription:
        return ClusterDescription(name="t", backend="mem", canary_switches=["leaf0"],
                                  canary_nics=["host0/mlx5_0"])

    def snapshot(self) -> Settings:
        return self.current

    def apply(self, settings: Settings) -> None:
        self.applies += 1
        if self.applies <= self.fail:
            raise ApplyError("host0/mlx5_0: write refused")
        if not self.stuck:
            self.current = settings

    def read_back(self) -> Settings:
        return self.current

    def counters(self) -> Counters:
        return Counters()

    def measure(self, workload, monitor=None) -> Measurement:  # type: ignore[no-untyped-def]
        return Measurement()


def test_restore_retries_then_verifies() -> None:
    cl = FlakyCluster(fail=2)
    rep = restore(cl, BASE, retries=3, backoff_s=0)
    assert rep.attempts == 3 and cl.current == BASE


def test_restore_that_never_holds_names_targets_and_values() -> None:
    with pytest.raises(RollbackError) as err:
        restore(FlakyCluster(stuck=True), BASE, retries=2, backoff_s=0)
    msg = str(err.value)
    assert "leaf0.kmin_bytes is 50000 (baseline 1048576)" in msg
    assert "host0/mlx5_0.rpg_time_reset is 50 (baseline 300)" in msg
