"""``Transactions.tentative`` (a promotion wave): kept when the body returns, restored with
verification when it raises; journalled either way (simulated canary, no traffic)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest

from safety.journal import Journal
from tuner.cluster.sim import SimCluster
from tuner.experiment import FabricSpec
from tuner.settings import Settings
from tuner.transaction import Transactions


def _tx(tmp_path: Path) -> tuple[SimCluster, Transactions, Settings, Settings, Journal]:
    cluster = SimCluster(FabricSpec(), ["leaf0"])
    base = cluster.snapshot()
    d = cluster.describe()
    new = Settings.uniform(d.canary_switches, d.canary_nics,
                           {"kmin_bytes": 100_000, "kmax_bytes": 400_000, "rpg_ai_rate": 9})
    journal = Journal(tmp_path / "journal.jsonl")
    return cluster, Transactions(cluster, journal, "promote:s", base, nullcontext), base, new, \
        journal


def test_kept_when_the_body_returns(tmp_path: Path) -> None:
    cluster, tx, _, new, journal = _tx(tmp_path)
    with tx.tentative(new, 1):
        assert cluster.read_back() == new
    assert cluster.read_back() == new
    assert [e.outcomes for e in journal.entries()] == [["kept"]] and journal.dirty() is None


def test_restored_when_the_body_raises(tmp_path: Path) -> None:
    cluster, tx, base, new, journal = _tx(tmp_path)
    with pytest.raises(RuntimeError, match="gate"), tx.tentative(new, 2):
        raise RuntimeError("gate says no")
    assert cluster.read_back() == base
    assert [e.outcomes for e in journal.entries()] == [["restored"]]
