"""Counter meanings (objectives/counters.py): absent = zero, levels and flags as read, and a
fresh simulated cluster that measures the same settings twice sees the same deltas."""

from __future__ import annotations

from objectives.counters import delta_row, kind, merge_row
from objectives.measurement import Counters
from tuner.cluster.sim import SimCluster
from tuner.experiment import FabricSpec, TopologySpec
from tuner.workload import Workload


def test_a_port_missing_from_before_counts_from_zero() -> None:
    before = Counters(ports={"host0/mlx5_0": {"rx_prio3_pause_duration": 100}})
    after = Counters(ports={"host0/mlx5_0": {"rx_prio3_pause_duration": 150},
                            "host1/mlx5_0": {"rx_prio3_pause_duration": 926}})
    d = after.delta(before)
    assert d.ports["host0/mlx5_0"]["rx_prio3_pause_duration"] == 50
    assert d.ports["host1/mlx5_0"]["rx_prio3_pause_duration"] == 926
    assert d.total("rx_prio3_pause_duration") == 976


def test_a_counter_missing_from_before_counts_from_zero() -> None:
    d = delta_row({"rx_prio3_pause": 4}, {"rx_prio3_pause": 6, "np_cnp_sent": 13_404})
    assert d == {"rx_prio3_pause": 2, "np_cnp_sent": 13_404}


def test_cleared_counters_levels_and_flags() -> None:
    d = delta_row({"queue3_ecn_marked_pkts": 900, "queue3_watermark_bytes": 5000, "link_up": 1},
                  {"queue3_ecn_marked_pkts": 40, "queue3_watermark_bytes": 1200, "link_up": 0})
    assert d == {"queue3_ecn_marked_pkts": 40,  # went backwards: cleared, 40 since
                 "queue3_watermark_bytes": 1200, "link_up": 0}


def test_the_table() -> None:
    assert kind("pfcwd3_storm_detected") == "count"  # SONiC: cumulative, judge the delta
    assert kind("queue3_watermark_bytes") == "level"
    assert kind("link_up") == "flag"
    assert kind("some_future_mlx5_counter") == "count"
    total = {"pfc3_rx_pkts": 5, "queue3_watermark_bytes": 9}
    merge_row(total, {"pfc3_rx_pkts": 2, "queue3_watermark_bytes": 4})
    assert total == {"pfc3_rx_pkts": 7, "queue3_watermark_bytes": 4}


def test_same_settings_twice_on_a_fresh_cluster_give_the_same_deltas() -> None:
    spec = FabricSpec(topology=TopologySpec(leaves=2, spines=1, hosts_per_leaf=4,
                                            buffer_bytes=1 << 20),
                      max_time_us=3_000, step_us=500)
    wl = Workload.model_validate({"parts": [
        {"kind": "collective", "op": "alltoall", "size_bytes": 1 << 20, "iterations": 2},
        {"kind": "background", "pattern": "incast", "load": 1.0, "fan_in": 3}]})
    c = SimCluster(spec, ["leaf0"])
    first = c.measure(wl, replicate=0)
    second = c.measure(wl, replicate=0)
    assert first.counters_before.ports == {}  # a fresh cluster: nothing counted yet
    d1, d2 = first.counters, second.counters
    assert d1.total("rx_prio3_pause_duration") > 0  # the incast does pause
    assert d1.ports == d2.ports
