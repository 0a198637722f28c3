"""Slice leases (``tuner.lease``): acquire, renew, release, steal on expiry, on SQLite and on a
real PostgreSQL server; and processes racing for two slices never hold one slice twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.faults.conftest import Recorder
from tuner.lease import LeaseKeeper, SliceLeases

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'optuna.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_one_holder_at_a_time_until_release(url: str) -> None:
    a, b = (SliceLeases(url, "st", ttl_s=30) for _ in range(2))
    la = a.acquire("pod1")
    assert la is not None and la.taken_from is None
    assert b.acquire("pod1") is None                      # held and live
    assert b.acquire("pod2") is not None                  # another slice is free
    assert SliceLeases(url, "other-study").acquire("pod1") is not None  # leases are per study
    assert a.acquire("pod1") is not None                  # the holder may re-acquire
    a.release(a.acquire("pod1") or la)
    lb = b.acquire("pod1")
    assert lb is not None and lb.taken_from is None       # released, not stolen
    assert {(r.slice, r.holder, r.live) for r in b.rows()} == {
        ("pod1", b.holder, True), ("pod2", b.holder, True)}


def test_expired_lease_is_stolen_and_the_old_holder_cannot_renew_or_release(url: str) -> None:
    a = SliceLeases(url, "st", ttl_s=1.0)  # slack for a loaded machine before the renew
    b = SliceLeases(url, "st", ttl_s=30)
    la = a.acquire("pod1")
    assert la is not None
    assert a.renew(la) is not None
    assert b.acquire("pod1") is None
    time.sleep(1.2)
    lb = b.acquire("pod1")
    assert lb is not None and lb.taken_from == a.holder   # the thief knows whom to clean up after
    assert a.renew(la) is None                            # the old holder learns it lost it
    a.release(la)                                         # and cannot free the thief's lease
    assert [(r.holder, r.live) for r in b.rows()] == [(b.holder, True)]


def test_renew_keeps_a_lease_alive_past_its_ttl_and_keeper_flags_a_loss(url: str) -> None:
    a = SliceLeases(url, "st", ttl_s=1.5)  # renewed every 0.5 s: slack for a loaded machine
    b = SliceLeases(url, "st", ttl_s=1.5)
    lease = a.acquire("pod1")
    assert lease is not None
    ticks: list[int] = []
    with LeaseKeeper(a, lease, on_tick=lambda: ticks.append(1)) as keeper:
        time.sleep(3.0)
        assert b.acquire("pod1") is None and not keeper.lost.is_set()
    assert len(ticks) >= 3
    with LeaseKeeper(a, lease) as keeper:
        with a.engine.begin() as c:  # the row vanishes under the keeper (taken and freed)
            c.execute(sa.text("DELETE FROM ecntune_slice_leases"))
        assert keeper.lost.wait(3.0)
    assert keeper.error == "lease expired or taken by another worker"


def test_racing_processes_never_hold_one_slice_at_once(pg_url: str) -> None:
    """Four processes race for two slices for 2 s with a 0.4 s lease; one dies holding one.
    The database-clock intervals in which each believed it held a slice never overlap."""
    from tests.scaleout.lease_worker import USAGE_DDL

    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as c:
        c.execute(sa.text(USAGE_DDL))
    SliceLeases(pg_url, "race").close()  # the lease table, before the racers start
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.scaleout.lease_worker", pg_url,
                               "race", "2", str(seed)], cwd=ROOT, env=env)
             for seed in range(4)]
    for p in procs:
        assert p.wait(timeout=60) == 0
    with engine.connect() as c:
        rows = c.execute(sa.text("SELECT slice, holder, t0, t1, stolen FROM lease_usage "
                                 "ORDER BY slice, t0")).all()
    assert len(rows) >= 3 * 4 + 2, "too few grants to say anything"
    assert sum(r.stolen for r in rows) >= 1, "no lease was ever stolen from a dead holder"
    for prev, cur in zip(rows, rows[1:], strict=False):
        if prev.slice == cur.slice:
            assert cur.t0 >= prev.t1, (f"{cur.slice} held by {prev.holder} until {prev.t1} and "
                                       f"by {cur.holder} from {cur.t0}")


def test_a_worker_for_a_held_slice_exits_3_naming_the_holder(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tests.scaleout.test_storage import tiny_yaml
    from tuner.cli import main

    db = f"sqlite:///{tmp_path / 'shared.db'}"
    f = tmp_path / "e.yaml"
    f.write_text(tiny_yaml(tmp_path / "res", db).replace(
        "canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 2}"))
    other = SliceLeases(db, "tiny", ttl_s=60)  # another worker, alive
    assert other.acquire("sim1") is not None
    r = CliRunner().invoke(main, ["worker", str(f), "--slice", "sim1"])
    assert r.exit_code == 3, r.output
    assert f"slice sim1 of study tiny is held by {other.holder}" in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "res" / "slices" / "sim1" / "journal.jsonl").exists()  # untouched


def test_a_refused_worker_leaves_the_live_holders_lease_alone(
        url: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Red team L3 "Lease": a second `ecntune worker` that cannot take a held slice (it waits
    for it with --wait-lease, then gives up) must not delete or touch the live holder's lease:
    the first worker's renewals go on and it keeps the slice."""
    from click.testing import CliRunner

    from tests.scaleout.test_storage import tiny_yaml
    from tuner.cli import main

    f = tmp_path / "e.yaml"
    f.write_text(tiny_yaml(tmp_path / "res", url).replace(
        "canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 2}"))
    first = SliceLeases(url, "tiny", ttl_s=3)
    lease = first.acquire("sim1")
    assert lease is not None
    with LeaseKeeper(first, lease) as keeper:  # renews every second, as a live worker does
        r = CliRunner().invoke(main, ["worker", str(f), "--slice", "sim1", "--wait-lease", "2",
                                      "--lease-ttl", "3"])
        assert r.exit_code == 3, r.output
        assert f"held by {first.holder}" in r.output
        time.sleep(1.5)  # at least one more renewal after the refused worker ended
        assert not keeper.lost.is_set(), keeper.error
        assert [(x.slice, x.holder, x.live) for x in first.rows()] == [
            ("sim1", first.holder, True)]
    assert first.renew(lease) is not None
    first.release(lease)
    first.close()
    Recorder(request.node.nodeid).record(
        f"a second `ecntune worker` for a slice a live worker holds ({url.split(':')[0]} "
        "lease table), waiting 2 s for it with --wait-lease",
        "the second exited 3 naming the holder and touched nothing; the first worker's lease "
        "kept renewing (same holder, live) and it kept the slice",
        dirty_targets=0, trials_lost=0, restore_s=None, backend="sim")
