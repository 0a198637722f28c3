"""The ``Cluster`` contract (tuner/cluster/base.py), run against every backend.

Adding a backend is one entry in ``BACKENDS``: a factory taking pytest's ``request`` and
returning a cluster whose canary has at least 2 NICs, plus a tiny workload it can measure fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from objectives.measurement import Counters, Measurement
from tuner.cluster.base import Cluster
from tuner.errors import ApplyError, SafetyAbort
from tuner.experiment import FabricSpec, TopologySpec
from tuner.settings import Settings
from tuner.workload import CollectivePart, ProbePart, Workload

TINY = Workload(parts=[CollectivePart(op="alltoall", size_bytes=262_144, iterations=1),
                       ProbePart(interval_us=20.0, pairs=2)], time_limit_s=60)


def _sim(request: pytest.FixtureRequest) -> Cluster:
    from tuner.cluster.sim import SimCluster

    spec = FabricSpec(topology=TopologySpec(leaves=2, spines=1, hosts_per_leaf=3),
                      max_time_us=5_000, step_us=250)
    return SimCluster(spec, ["leaf0"], {"kmin_bytes": 500_000, "kmax_bytes": 1_500_000})


def _ssh(request: pytest.FixtureRequest) -> Cluster:
    """The SSH backend on the session's emulated cluster (real sshd, stand-in tools)."""
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import load_inventory

    emu = request.getfixturevalue("emulated_cluster")  # skips without openssh-server
    return SshCluster(load_inventory(emu.inventory_path))


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], Cluster]] = {
    "sim": _sim,
    "ssh": _ssh,
}


@pytest.fixture(params=sorted(BACKENDS))
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = BACKENDS[request.param](request)
    with c:
        yield c


def _changed(base: Settings, **knobs: int) -> Settings:
    sw = {s: e.model_copy(update={k: v for k, v in knobs.items() if k in type(e).model_fields})
          for s, e in base.switches.items()}
    nic = {n: d.model_copy(update={k: v for k, v in knobs.items() if k in type(d).model_fields})
           for n, d in base.nics.items()}
    return Settings(switches=sw, nics=nic)


def test_describe_separates_canary_from_the_rest(cluster: Cluster) -> None:
    d = cluster.describe()
    assert d.canary_switches and len(d.canary_nics) >= 2
    assert not set(d.canary_switches) & set(d.other_switches)
    assert not set(d.canary_nics) & set(d.other_nics)
    assert d.nic_gbps > 0


def test_snapshot_is_read_back_of_the_canary(cluster: Cluster) -> None:
    snap = cluster.snapshot()
    d = cluster.describe()
    assert snap == cluster.read_back()
    assert sorted(snap.switches) == sorted(d.canary_switches)
    assert sorted(snap.nics) == sorted(d.canary_nics)


def test_apply_then_read_back_and_restore(cluster: Cluster) -> None:
    base = cluster.snapshot()
    new = _changed(base, kmin_bytes=20_000, kmax_bytes=200_000, pmax_percent=40,
                   rpg_ai_rate=20, min_time_between_cnps=4)
    cluster.apply(new)
    assert cluster.read_back() == new
    cluster.apply(base)
    assert cluster.read_back() == base


def test_apply_outside_canary_changes_nothing(cluster: Cluster) -> None:
    base = cluster.snapshot()
    d = cluster.describe()
    bad = Settings(switches={**_changed(base, kmin_bytes=30_000).switches,
                             **({d.other_switches[0]: next(iter(base.switches.values()))}
                                if d.other_switches else {"no-such-switch":
                                                          next(iter(base.switches.values()))})},
                   nics=dict(base.nics))
    with pytest.raises(ApplyError):
        cluster.apply(bad)
    assert cluster.read_back() == base


def test_measure_returns_results_and_cumulative_counters(cluster: Cluster) -> None:
    c0 = cluster.counters()
    m = cluster.measure(TINY)
    assert isinstance(m, Measurement)
    assert [c.name for c in m.collectives] == ["alltoall"]
    assert m.collectives[0].busbw_gbytes_per_s > 0
    assert 0 < m.collectives[0].busbw_gbytes_per_s <= m.collectives[0].line_rate_gbytes_per_s
    assert m.latency is not None and m.latency.count > 0
    assert m.duration_s > 0
    c1 = cluster.counters()
    assert c1.taken_at_s - c0.taken_at_s >= m.duration_s * (1 - 1e-9)
    # Cumulative: a second measurement adds to what the first left. (The counters before the
    # first are empty or zero on a fresh backend, so only the second is a real check.)
    grown = {(p, k) for p, row in c1.ports.items() for k, v in row.items() if v > 0}
    assert grown  # the first measurement's traffic is in the counters
    m2 = cluster.measure(TINY)
    c2 = cluster.counters()
    assert c2.taken_at_s - c1.taken_at_s >= m2.duration_s * (1 - 1e-9)
    for port, row in c1.ports.items():  # never below what was read before
        for name, v in row.items():
            if not name.endswith(("_watermark_bytes", "_storm_detected")):
                assert c2.ports[port][name] >= v, (port, name)
    assert any(c2.ports[p][k] > c1.ports[p][k] for p, k in grown), "nothing added"
    nic = cluster.describe().canary_nics[0]
    assert nic in c1.ports  # NIC ports are keyed by the NIC target name


class _AbortSecondPoll:
    interval_s = 0.0

    def __init__(self) -> None:
        self.polls = 0

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.polls += 1
        if self.polls >= 2:
            raise SafetyAbort("pfc_storm", "test monitor")


def test_monitor_abort_stops_the_measurement(cluster: Cluster) -> None:
    mon = _AbortSecondPoll()
    with pytest.raises(SafetyAbort) as info:
        cluster.measure(TINY, mon)
    assert info.value.reason == "pfc_storm"
    assert mon.polls == 2
    assert cluster.measure(TINY).collectives  # still usable afterwards
