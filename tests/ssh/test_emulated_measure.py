"""Measurements over SSH on the emulated cluster: results, the probe under load, failures with
their reason, absent counters, and the live monitor stopping remote processes.

The stand-ins behave like the tools in time: ``mpirun`` starts up before traffic flows and
prints a row per cycle; ``ib_write_lat`` samples the fabric as it is at each moment, so a probe
that runs outside the collectives measures an idle fabric, fast."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from objectives.measurement import Counters
from tests.ssh.conftest import gone
from tuner.cluster.ssh import SshCluster
from tuner.emulated.cluster import EmulatedCluster
from tuner.errors import MeasurementError, SafetyAbort
from tuner.inventory import load_inventory
from tuner.workload import Workload

pytestmark = pytest.mark.ssh

SMALL = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 1 << 20,
                         "iterations": 2},
                        {"kind": "probe", "size_bytes": 64, "pairs": 1}], time_limit_s=90)
MIX = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 1 << 20,
                       "iterations": 2},
                      {"kind": "collective", "op": "alltoall", "size_bytes": 1 << 18,
                       "iterations": 2},
                      {"kind": "background", "pattern": "incast", "load": 0.3, "fan_in": 2},
                      {"kind": "probe", "size_bytes": 64, "pairs": 2, "interval_us": 20}],
               time_limit_s=90)
COLL_ONLY = Workload(parts=SMALL.collectives, time_limit_s=60)


@pytest.fixture
def cluster(emulated_cluster: EmulatedCluster) -> Iterator[SshCluster]:
    with SshCluster(load_inventory(emulated_cluster.inventory_path)) as c:
        yield c


@pytest.mark.slow  # ~20 s: timed pass + measured pass
def test_measure_returns_busbw_latency_and_counter_deltas(cluster: SshCluster) -> None:
    m = cluster.measure(SMALL)
    [coll] = m.collectives
    assert (coll.name, coll.size_bytes, coll.ranks) == ("all_reduce", 1 << 20, 4)
    assert 0 < coll.busbw_gbytes_per_s <= coll.line_rate_gbytes_per_s == 12.5  # 100 Gb/s NICs
    assert m.latency is not None and m.latency.count == 5000
    assert 0 < m.latency.p50_us <= m.latency.p99_us <= m.latency.max_us
    assert "all_reduce_perf" in m.raw["nccl"] and "t_typical" in m.raw["perftest"]
    assert m.counters.total("tx_prio3_packets") > 0  # the collective's traffic, per NIC
    assert len(coll.iteration_times_us) == 8  # -N 8: one row per cycle, averaged
    assert m.extra["probe_overlap"] >= 0.9


@pytest.mark.slow
def test_the_probe_runs_under_the_concurrent_collectives_and_background(
        cluster: SshCluster, emulated_cluster: EmulatedCluster) -> None:
    """The twin's experiment: both parts at once, incast flows, two probe pairs, all loaded."""
    m = cluster.measure(MIX)
    assert [c.name for c in m.collectives] == ["all_reduce", "alltoall"]
    assert m.extra["probe_overlap"] >= 0.9
    assert m.latency is not None and m.latency.count == 2 * 5000  # every pair's samples
    assert "perftest1" in m.raw
    rx = {h: m.counters.ports[f"{h}/mlx5_0"]["rx_prio3_packets"] for h in ("host0", "host3")}
    assert rx["host0"] > 1.2 * rx["host3"], rx  # host0 is the incast's receiver (ib_write_bw)
    idle = Workload(parts=[{"kind": "probe", "size_bytes": 64, "pairs": 2,
                            "interval_us": 20}], time_limit_s=60)
    quiet = cluster.measure(idle)  # the same probe on an idle fabric
    assert quiet.latency is not None and "probe_overlap" not in quiet.extra
    assert m.latency.mean_us > quiet.latency.mean_us  # the load is in the samples


@pytest.mark.slow
def test_a_probe_that_misses_the_collectives_fails_the_measurement(
        cluster: SshCluster, emulated_cluster: EmulatedCluster) -> None:
    """A probe whose start is delayed past the collectives samples an idle fabric and ends
    fast; the measurement fails (the loop makes that trial failed:measurement)."""
    emulated_cluster.inject("host0", hang={"ib_write_lat": 8})
    emulated_cluster.inject("host1", hang={"ib_write_lat": 8})
    with pytest.raises(MeasurementError, match=r"overlapped the collectives for \d+% .*"
                                               "not latency under load"):
        cluster.measure(SMALL)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"nccl_warn": "NET/IB : Got completion from peer with error 12"},
         "NCCL WARN NET/IB : Got completion from peer with error 12"),
        ({"nccl_wrong": 3}, "data check failed (#wrong = "),
        ({"exit_code": {"mpirun": 2}}, "all_reduce_perf -b 1048576 exited 2"),
    ],
)
def test_a_bad_run_is_a_failed_measurement_with_its_reason(
        cluster: SshCluster, emulated_cluster: EmulatedCluster, fault: dict[str, object],
        reason: str) -> None:
    emulated_cluster.inject("host0", **fault)  # host0 is the launcher
    with pytest.raises(MeasurementError) as err:
        cluster.measure(COLL_ONLY)
    assert reason in str(err.value)


def test_a_measurement_past_its_time_limit_fails_and_stops(
        cluster: SshCluster, emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.inject("host0", hang={"mpirun": 60})
    quick = SMALL.model_copy(update={"time_limit_s": 2.0})
    t0 = time.monotonic()
    with pytest.raises(MeasurementError, match="timed out after 2 s"):
        cluster.measure(quick)
    assert time.monotonic() - t0 < 20


def test_absent_counters_are_reported_not_zeroed(cluster: SshCluster,
                                                 emulated_cluster: EmulatedCluster) -> None:
    # PFC off on host2's RoCE priority: mlx5 then has no rx_prio3_pause* counters at all.
    cluster.pool["host2"].run("mlnx_qos -i ens1f0np0 --pfc 0,0,0,0,0,0,0,0")
    # A PFC storm on both NICs (the emulator's pfc_storm fault: frames per second, 50 us each)
    # on top of the fixture's zeroed counters; 0.2 s later the read sees about 2000 frames.
    for host in ("host1", "host2"):
        emulated_cluster.inject(host, pfc_storm=10_000)
    time.sleep(0.2)
    after = cluster.counters()
    emulated_cluster.inject("host1", pfc_storm=0)
    emulated_cluster.inject("host2", pfc_storm=0)
    # host2 paused (its port-level count rose) but has no per-priority row: absent, not 0.
    assert after.ports["host2/mlx5_0"]["rx_pause_ctrl_phy"] >= 2000
    assert "rx_prio3_pause" not in after.ports["host2/mlx5_0"]
    row = after.ports["host1/mlx5_0"]  # PFC on: the per-priority counters, read as they are
    assert row["rx_prio3_pause"] >= 2000
    assert row["rx_prio3_pause_duration"] == 50 * row["rx_prio3_pause"]
    tiny = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 65536,
                            "iterations": 1}], time_limit_s=60)  # lossy RoCE is slow to simulate
    m = cluster.measure(tiny)
    note = next(n for n in m.notes if n.startswith("host2/mlx5_0: counters absent"))
    assert "rx_prio3_pause" in note and "only where PFC is on" in note
    assert not any(n.startswith("host1/mlx5_0") for n in m.notes)


class _AbortOnFirstPoll:
    interval_s = 0.2

    def __init__(self) -> None:
        self.seen: list[Counters] = []

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.seen.append(counters)
        raise SafetyAbort("pause_storm", f"test at {elapsed_s:.1f} s")


def test_a_safety_abort_stops_the_remote_processes(
        cluster: SshCluster, emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.inject("host0", hang={"mpirun": 60})  # a run that would go on and on
    mon = _AbortOnFirstPoll()
    with pytest.raises(SafetyAbort, match="pause_storm"):
        cluster.measure(SMALL, mon)
    assert len(mon.seen) == 1 and "host0/mlx5_0" in mon.seen[0].ports
    assert gone(emulated_cluster, "mpirun") and gone(emulated_cluster, "ib_write_lat")
