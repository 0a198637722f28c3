"""The public API the tuner's simulated backend is written against: names, shapes, counters,
stepping, per-device settings, scenario files and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rocesim import (
    Background,
    Collective,
    DcqcnConfig,
    EcnConfig,
    Fabric,
    Probes,
    SimResult,
    Simulation,
    Topology,
    Workload,
    simulate,
)
from rocesim.__main__ import main as cli_main
from rocesim._state import ACK_FLOW, RC, REMAIN
from rocesim.config import DCQCN_FIELDS
from rocesim.scenario import ScenarioError, build_scenario, load_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "rocesim" / "scenarios").iterdir())

NIC_COUNTERS = {"rx_prio3_pause", "tx_prio3_pause", "rx_prio3_pause_duration",
                "tx_prio3_pause_duration", "rx_prio3_pause_transition",
                "tx_prio3_pause_transition", "np_cnp_sent", "np_ecn_marked_roce_packets",
                "rp_cnp_handled", "rx_prio3_discards", "rx_prio3_bytes", "tx_prio3_bytes"}
SWITCH_COUNTERS = {"pfc3_rx_pkts", "pfc3_tx_pkts", "queue3_ecn_marked_pkts",
                   "queue3_drop_pkts", "queue3_watermark_bytes", "queue3_tx_bytes",
                   "pfcwd3_storm_detected"}


def test_names_follow_the_contract() -> None:
    fab = Fabric(Topology(leaves=2, spines=2, hosts_per_leaf=4))
    assert fab.switch_names == ["leaf0", "leaf1", "spine0", "spine1"]
    assert fab.nic_names[:2] == ["host0/mlx5_0", "host1/mlx5_0"] and len(fab.nic_names) == 8
    assert fab.hosts_under("leaf1") == [f"host{i}/mlx5_0" for i in range(4, 8)]
    ports = fab.port_names
    assert "leaf0/Ethernet0" in ports and "leaf0/Ethernet16" in ports  # 4 NICs, then uplinks
    assert "spine1/Ethernet4" in ports  # spine port to leaf1
    single = Fabric(Topology(kind="single_switch", hosts_per_leaf=3, nics_per_host=2))
    assert single.switch_names == ["sw0"]
    assert single.nic_names == ["host0/mlx5_0", "host0/mlx5_1", "host1/mlx5_0",
                                "host1/mlx5_1", "host2/mlx5_0", "host2/mlx5_1"]
    with pytest.raises(KeyError, match="unknown leaf"):
        fab.hosts_under("spine0")


def test_settings_are_per_device_and_validated() -> None:
    fab = Fabric(Topology())
    assert fab.dcqcn("host0/mlx5_0") == DcqcnConfig()
    assert DcqcnConfig().rpg_time_reset == 300 and DcqcnConfig().rpg_gd == 11
    assert set(DCQCN_FIELDS) == set(DcqcnConfig().as_dict())
    fab.set_ecn("leaf0", EcnConfig(10_000, 50_000, 0.5))
    assert fab.ecn("leaf0") == EcnConfig(10_000, 50_000, 0.5)
    assert fab.ecn("leaf1") == EcnConfig()
    assert not fab.ecn("leaf0", tc=0).enabled  # other queues do not mark unless set
    fab.set_dcqcn("host3/mlx5_0", DcqcnConfig(rpg_ai_rate=20))
    assert fab.dcqcn("host3/mlx5_0").rpg_ai_rate == 20
    assert fab.dcqcn("host2/mlx5_0").rpg_ai_rate == 5
    with pytest.raises(KeyError, match="unknown switch"):
        fab.set_ecn("leaf9", EcnConfig())
    with pytest.raises(ValueError, match="kmin_bytes"):
        EcnConfig(5000, 1000, 0.1)
    with pytest.raises(ValueError, match="rpg_gd"):
        DcqcnConfig(rpg_gd=16)
    # XOFF point: reserve + 2^alpha_log2 x shared buffer (empty buffer, one ingress port)
    topo = fab.topo
    assert fab.xoff_bytes("leaf0") == topo.reserve_bytes + topo.buffer_bytes // 8
    fab.set_buffer("spine0", 64 * 2**20)  # a deeper-buffered spine
    assert fab.xoff_bytes("spine0") == topo.reserve_bytes + 8 * 2**20
    assert fab.buffer_bytes("leaf0") == topo.buffer_bytes
    # PFC onset of an egress queue fed by n ports: n x (reserve + B/8 / (1 + n/8)); the
    # fewest senders that congest a port: 2 at one link speed, 1 from a faster uplink
    assert fab.pfc_onset_bytes("leaf0", 8) == 8 * (topo.reserve_bytes + topo.buffer_bytes // 16)
    assert fab.congesting_fan_in("leaf0") == 2
    assert Fabric(Topology(uplink_gbps=400)).congesting_fan_in("leaf0") == 1
    with pytest.raises(ValueError, match="fan_in must be >= 1"):
        fab.pfc_onset_bytes("leaf0", 0)


def _quick_workload(fab: Fabric) -> Workload:
    return Workload(collectives=[Collective("all_reduce", 2 * 2**20, fab.nic_names,
                                            iterations=3),
                                 Collective("alltoall", 2**20, fab.nic_names, iterations=2,
                                            name="a2a")],
                    background=[Background("permutation", 0.2, priority="roce")],
                    probes=Probes(pairs=4, interval_us=25))


def test_result_shapes_and_nccl_factors() -> None:
    fab = Fabric(Topology())
    res = simulate(fab, _quick_workload(fab), seed=1)
    assert isinstance(res, SimResult)
    ar, a2a = res.collectives
    assert (ar.op, ar.size_bytes, ar.ranks, a2a.name) == ("all_reduce", 2 * 2**20, 8, "a2a")
    assert len(ar.iteration_times_us) == 3 and len(a2a.iteration_times_us) == 2
    # [NCCL] busbw = algbw x 2(n-1)/n for AllReduce, (n-1)/n for AlltoAll; GB/s = 1e9 B/s
    mean_t = np.mean(ar.iteration_times_us)
    assert ar.algbw_gbytes_per_s == pytest.approx(2 * 2**20 / (mean_t * 1e-6) / 1e9)
    assert ar.busbw_gbytes_per_s == pytest.approx(ar.algbw_gbytes_per_s * 2 * 7 / 8)
    assert a2a.busbw_gbytes_per_s == pytest.approx(a2a.algbw_gbytes_per_s * 7 / 8)
    # a NIC cannot beat its line rate x header efficiency (12.5 GB/s x 4096/4178)
    assert ar.busbw_gbytes_per_s <= 12.5 * 4096 / 4178 * 1.001
    assert res.latency_us.size > 10 and res.latency_us.min() > 2.0
    assert res.p50_us == pytest.approx(np.percentile(res.latency_us, 50))
    assert res.p50_us <= res.p99_us <= res.p999_us
    for nic in fab.nic_names:
        assert NIC_COUNTERS <= set(res.counters[nic])
    assert SWITCH_COUNTERS <= set(res.counters["leaf0/Ethernet0"])
    assert all(isinstance(v, int) for c in res.counters.values() for v in c.values())
    assert set(res.uplink_bytes) == {"leaf0/Ethernet16", "leaf0/Ethernet20",
                                     "leaf1/Ethernet16", "leaf1/Ethernet20"}
    # what the NICs sent across leaves is what the uplinks carried
    assert sum(res.uplink_bytes.values()) > 0
    ts = res.timeseries
    assert set(ts) == {"t_us", "queue_bytes", "paused", "rate_gbps"}
    assert 0 < len(ts["t_us"]) <= 2000 and np.all(np.diff(ts["t_us"]) > 0)
    assert res.timeseries_port in res.counters
    assert res.steps == round(res.sim_time_us / res.dt_us) and res.wall_s > 0
    json.dumps(res.to_dict())


def test_stepping_matches_one_shot_and_counters_are_cumulative() -> None:
    fab = Fabric(Topology())
    one = simulate(fab, _quick_workload(fab), seed=2)
    sim = Simulation(fab, _quick_workload(fab), seed=2)
    prev = 0
    while not sim.done:
        sim.advance(137.0)
        c = sim.counters()
        tx = c["host0/mlx5_0"]["tx_prio3_bytes"]
        assert tx >= prev
        prev = tx
    stepped = sim.result()
    assert stepped.counters == one.counters
    assert [c.iteration_times_us for c in stepped.collectives] == \
        [c.iteration_times_us for c in one.collectives]
    assert np.array_equal(stepped.latency_us, one.latency_us)


def test_canary_settings_apply_only_where_set() -> None:
    # A canary slice: aggressive ECN on leaf0 only; marks appear only on leaf0's queues.
    fab = Fabric(Topology(leaves=2, spines=1, hosts_per_leaf=4))
    for sw in fab.switch_names:
        fab.set_ecn(sw, EcnConfig(enabled=False))
    fab.set_ecn("leaf0", EcnConfig(1_000, 10_000, 1.0))
    n = fab.nic_names
    wl = Workload(background=[Background("incast", 1.0, 3, [n[0], n[1], n[2], n[3]]),
                              Background("incast", 1.0, 3, [n[4], n[5], n[6], n[7]])])
    res = simulate(fab, wl, max_time_us=2000)
    marks = {p: c["queue3_ecn_marked_pkts"] for p, c in res.counters.items()
             if "queue3_ecn_marked_pkts" in c}
    assert marks["leaf0/Ethernet0"] > 0
    assert all(v == 0 for p, v in marks.items() if not p.startswith("leaf0/"))
    assert res.counters["host1/mlx5_0"]["rp_cnp_handled"] > 0
    assert res.counters["host5/mlx5_0"]["rp_cnp_handled"] == 0


def test_lossy_background_drops_but_roce_stays_lossless() -> None:
    # Backup traffic in a lossy class (TC0) overflowing the buffer is dropped; the RoCE class
    # on the same ports keeps zero discards (PFC protects it).
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=9, buffer_bytes=2 * 2**20))
    n = fab.nic_names
    wl = Workload(collectives=[Collective("all_reduce", 2**20, n[4:9], iterations=2)],
                  background=[Background("incast", 1.0, 3, n[0:4], priority="other",
                                         lossless=False)])
    res = simulate(fab, wl, max_time_us=20_000)
    c = res.counters["sw0/Ethernet0"]
    drops0 = sum(v.get("queue0_drop_pkts", 0) for v in res.counters.values())
    assert drops0 > 0
    assert sum(v.get("queue3_drop_pkts", 0) for v in res.counters.values()) == 0
    assert c["queue0_tx_bytes"] > 0
    assert res.collectives[0].completed


def test_headroom_overflow_is_the_only_lossless_drop_and_data_is_resent() -> None:
    # [PFC]: bytes in flight after XOFF land in headroom; a headroom smaller than the round
    # trip overflows and the lossless class drops (counted), yet the collective completes.
    topo = Topology(kind="single_switch", hosts_per_leaf=5, headroom_bytes=1000,
                    link_delay_us=2.0)
    fab = Fabric(topo)
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    wl = Workload(collectives=[Collective("alltoall", 8 * 2**20, fab.nic_names, iterations=1)],
                  background=[Background("incast", 1.0, 4)])
    res = simulate(fab, wl, max_time_us=50_000)
    drops = sum(v.get("queue3_drop_pkts", 0) for v in res.counters.values())
    assert drops > 0
    assert res.collectives[0].completed
    ok = simulate(Fabric(Topology(kind="single_switch", hosts_per_leaf=5, link_delay_us=2.0)),
                  wl, max_time_us=50_000)
    assert sum(v.get("queue3_drop_pkts", 0) for v in ok.counters.values()) == 0


def test_long_pauses_are_reported_as_pfc_storms() -> None:
    # PFC watchdog model: an egress queue paused continuously for longer than the detection
    # time is reported (SONiC pfcwd "storm detected"); a big resume offset holds XOFF long.
    # 3:1 incast across one spine, so pauses reach the spine's and the leaf's egress queues.
    def run(detect_us: float) -> SimResult:
        fab = Fabric(Topology(leaves=2, spines=1, hosts_per_leaf=4, uplink_gbps=400,
                              resume_offset_bytes=3 * 2**20, pfcwd_detect_us=detect_us))
        for sw in fab.switch_names:
            fab.set_ecn(sw, EcnConfig(enabled=False))
        n = fab.nic_names
        wl = Workload(background=[Background("incast", 1.0, 3, [n[0], n[4], n[5], n[6]])])
        return simulate(fab, wl, max_time_us=5_000)

    hot = run(100.0)
    assert hot.storms and all(pr == 3 and 0 <= t < 5_000 for _, pr, t in hot.storms)
    switch_ports = [p for p, _, _ in hot.storms if p.startswith(("spine", "leaf"))]
    nic_ports = [p for p, _, _ in hot.storms if p.startswith("host")]
    assert switch_ports and nic_ports
    for port in switch_ports:
        assert hot.counters[port]["pfcwd3_storm_detected"] == 1
        assert hot.counters[port]["pfc3_rx_pause_us"] >= 100
    for port in nic_ports:
        assert hot.counters[port]["rx_prio3_pause_duration"] >= 100
    assert run(200_000.0).storms == []


def test_unloaded_probe_latency_is_propagation_plus_serialisation() -> None:
    # 2 hops of 1 µs cable + (64 + 82) bytes at 100 Gb/s per hop
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=4))
    res = simulate(fab, Workload(probes=Probes(pairs=2, interval_us=10)), max_time_us=1000)
    assert res.p50_us == pytest.approx(2 * (1.0 + 146 / 12_500), rel=0.01)


def test_bad_inputs_raise_clear_errors() -> None:
    fab = Fabric(Topology())
    with pytest.raises(KeyError, match="unknown NIC"):
        Simulation(fab, Workload(collectives=[Collective("alltoall", 1, ["host0/mlx5_0",
                                                                          "hostX"])]))
    with pytest.raises(ValueError, match="dt_us"):
        Simulation(fab, Workload(), dt_us=2.0)
    with pytest.raises(ValueError, match="op"):
        Collective("broadcast", 1, fab.nic_names)
    with pytest.raises(ValueError, match="fan_in"):
        Simulation(fab, Workload(background=[Background("incast", 1.0, 8)]))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_example_scenarios_run_from_the_cli(path: Path, capsys: pytest.CaptureFixture[str],
                                            ) -> None:
    assert cli_main([str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"collectives", "latency", "counters", "uplink_bytes", "sim_time_us"} <= set(out)
    fab, wl, opts = load_scenario(path)
    assert fab.nic_names and (wl.collectives or wl.background)


def test_scenario_errors_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload:\n  collectives:\n    - {op: all_reduce, size_bytes: 10, "
                   "ranks: all, itterations: 3}\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: workload.collectives\[0\].*itterations"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="ecn.leaf7: unknown switch"):
        build_scenario({"ecn": {"leaf7": {}}, "workload": {}})
    with pytest.raises(ScenarioError, match="workload: required"):
        build_scenario({"topology": {"leaves": 2}})
    assert cli_main([str(bad)]) == 2


QUICK = (Path(__file__).resolve().parents[2] / "rocesim" / "scenarios"
         / "quick_leaf_spine.yaml").read_text()


@pytest.mark.parametrize(("edit", "field"), [
    (("uplink_gbps: 100}", "uplink_gbps: 100, link_delay_us: .nan}"), "topology: link_delay_us"),
    (("nic_gbps: 100,", "nic_gbps: .inf,"), "topology: nic_gbps"),
    (("uplink_gbps: 100}", "uplink_gbps: 100, buffer_bytes: .nan}"), "topology: buffer_bytes"),
    (("pmax: 0.2}", "pmax: .nan}"), "ecn.default: pmax"),
    (("interval_us: 50}", "interval_us: .nan}"), "workload.probes: interval_us"),
    (("iterations: 5}", "iterations: 5, size_bytes: .inf}"), "workload.collectives[0]"),
    (("seed: 0", "seed: 0\nmax_time_us: .inf"), "max_time_us"),
    (("seed: 0", "seed: .nan"), "seed"),
])
def test_a_number_that_is_not_finite_is_named(edit: tuple[str, str], field: str,
                                              tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              ) -> None:
    """NaN passes every ``< bound`` check (a NaN buffer simulated, silently) and an infinity
    overflowed an int conversion (a traceback): the file and the field are named, exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICK.replace(edit[0], edit[1].replace("\\n", "\n"), 1))
    assert bad.read_text() != QUICK
    assert cli_main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"bad.yaml: {field}" in err and "finite" in err, err


@pytest.mark.parametrize(("line", "key"), [
    ("fabric_seed: abc", "fabric_seed"), ("seed: abc", "seed"), ("seed: -1", "seed"),
    ("seed: 1.5", "seed"), ("seed: true", "seed"), ("dt_us: abc", "dt_us"),
    ("max_time_us: -5", "max_time_us"), ("max_time_us: 0", "max_time_us"),
])
def test_a_scenarios_run_options_are_checked(line: str, key: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A negative time limit ran (and printed an empty run); a word for a seed said "invalid
    literal for int()", naming neither file nor field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICK.replace("seed: 0", line, 1))
    assert cli_main([str(bad)]) == 2
    assert f"bad.yaml: {key} must be a finite" in capsys.readouterr().err


def test_nic_port_is_shared_max_min_between_qps() -> None:
    # Two QPs on one 100G port, one capped at 10 Gb/s: the arbiter gives it all 10 and the
    # other the remaining 90 (max-min), not a proportional 9.1 / 90.9.
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=3))
    n = fab.nic_names
    wl = Workload(background=[Background("incast", 0.1, 1, [n[1], n[0]]),
                              Background("incast", 1.0, 1, [n[2], n[0]])])
    sim = Simulation(fab, wl, max_time_us=2000)
    sim.advance(1000)
    d0 = sim.flow_stats()["delivered_bytes"].copy()
    sim.advance(1000)
    rates = (sim.flow_stats()["delivered_bytes"] - d0) * 8 / 1000 / 1e3
    eff = fab.topo.efficiency
    assert rates == pytest.approx([10 * eff, 90 * eff], rel=0.01)


def test_wrr_shares_a_link_between_roce_and_the_other_class() -> None:
    # Egress scheduling: work-conserving WRR between the two data classes (50/50 by default),
    # and a lossless "other" class is paused on its own priority (PFC 4), not on priority 3.
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=3))
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    n = fab.nic_names
    wl = Workload(background=[Background("incast", 1.0, 1, [n[0], n[1]], priority="roce"),
                              Background("incast", 1.0, 1, [n[0], n[2]], priority="other",
                                         lossless=True)])
    sim = Simulation(fab, wl, max_time_us=4000)
    sim.advance(2000)
    d0 = sim.flow_stats()["delivered_bytes"].copy()
    sim.advance(2000)
    rates = (sim.flow_stats()["delivered_bytes"] - d0) * 8 / 2000 / 1e3
    eff = fab.topo.efficiency
    assert rates == pytest.approx([50 * eff, 50 * eff], rel=0.02)
    c = sim.counters()
    assert c["host2/mlx5_0"]["rx_prio4_pause"] > 0  # the other class is paused on prio 4
    assert c["host1/mlx5_0"]["rx_prio3_pause"] > 0
    assert sum(v.get("queue4_drop_pkts", 0) + v.get("queue3_drop_pkts", 0)
               for v in c.values()) == 0


def test_time_series_rates_are_those_of_the_sending_flows_at_each_point() -> None:
    """The per-link rate sums behind the time series' ``rate_gbps`` are summed during the
    sends (``_kernel.injection``) and patched where collectives restart or finish; at every
    recorded point they must equal a recount over the live flows: the DCQCN rate (capped by
    the offered rate) of each flow that still has data to send, on every link of its path.
    Two iterations of two collectives plus a background flow, stepped one step at a time, so
    restarts and the end of a group fall on recorded points."""
    fab = Fabric(Topology())
    for sw in ("leaf0", "leaf1"):
        fab.set_ecn(sw, EcnConfig(5_000, 50_000, 0.2))
    wl = Workload(collectives=[Collective("all_reduce", 2 * 2**20, fab.nic_names, iterations=2),
                               Collective("alltoall", 1 * 2**20, fab.nic_names, iterations=2)],
                  background=[Background("incast", 0.5, 3)])
    sim = Simulation(fab, wl, max_time_us=4_000)
    fl = sim.state[3]
    checked = restarts = 0
    iters = sim.g_iter.copy()
    while not sim.done:
        sim.advance(sim.dt)
        if np.any(sim.g_iter != iters):
            restarts += 1
            iters = sim.g_iter.copy()
        if sim.t % int(sim.ts_every[0]) != 0:
            continue
        want = np.zeros_like(sim.lrate)
        for f in fl.live[: int(fl.n_live[0])]:
            if sim.ff[f, REMAIN] > 0.0 and fl.pred[f] != ACK_FLOW:
                r = min(sim.ff[f, RC], fl.cap[f])
                for h in range(int(fl.hops[f])):
                    want[fl.path[f, h]] += (r, 1.0)
        np.testing.assert_array_equal(sim.lrate[:, 1], want[:, 1])
        np.testing.assert_allclose(sim.lrate[:, 0], want[:, 0], rtol=1e-12)
        checked += 1
    assert restarts >= 3 and checked > 1000


def test_every_kernel_helper_is_inlined_into_the_step() -> None:
    # Left to LLVM's cost model the phases stayed calls, each passing every field of the state
    # structures it takes: a small step took 2.8x as long (S1 17 -> 6 ms; rocesim/_kernel.py).
    from numba.core.registry import CPUDispatcher

    import rocesim._kernel as K

    kernels = {n: d for n, d in vars(K).items() if isinstance(d, CPUDispatcher)}
    helpers = {n for n, d in kernels.items() if d.targetoptions.get("no_cpython_wrapper")}
    assert len(helpers) >= 35 and "arrive" in helpers and "run" not in helpers
    assert sorted(n for n in helpers if not kernels[n].targetoptions.get("forceinline")) == []
