"""Physics tests of rocesim (issue #2): each asserts numbers and names its source.

Sources used below:
- [DCQCN] Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015
  (RP/NP algorithm, Fig. 6 state machine, fairness/utilisation results of §5-6).
- [CX] ConnectX DCQCN parameter table, shared/reference/INDEX.md section 2 (names, units,
  factory values: rpg_gd 11, initial_alpha_value 1023, rpg_time_reset 300 µs,
  rpg_hai_rate 50 Mb/s, rate_reduce_monitor_period 4 µs).
- [NCCL] NVIDIA/nccl-tests doc/PERFORMANCE.md (busbw factors), INDEX.md section 1b.
- [ROCE] IBTA RoCEv2 (Annex A17) framing: Eth 14 + FCS 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4,
  plus IEEE 802.3 preamble/SFD 8 and inter-frame gap 12 bytes per packet.
- [PFC] IEEE 802.1Qbb (pause per priority, 512-bit-time quanta) and the ECN-before-PFC rule
  (Kmax below the XOFF point) from the DCQCN paper §3 / vendor RoCE guides.
"""

from __future__ import annotations

import numpy as np
import pytest

from rocesim import (
    Background,
    Collective,
    DcqcnConfig,
    EcnConfig,
    Fabric,
    Probes,
    Simulation,
    Topology,
    Workload,
    simulate,
)
from rocesim.engine import DEFAULT_DT_US

MODERATE = EcnConfig(kmin_bytes=20_000, kmax_bytes=200_000, pmax=0.05)


def _window_rates(sim: Simulation, first_us: float, second_us: float) -> np.ndarray:
    """Per-flow goodput (Gb/s) over the second window, after a warm-up window."""
    sim.advance(first_us)
    d0 = sim.flow_stats()["delivered_bytes"].copy()
    sim.advance(second_us)
    d = sim.flow_stats()["delivered_bytes"] - d0
    return d * 8.0 / second_us / 1e3


def _jain(x: np.ndarray) -> float:
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def _pfc_frames(counters: dict[str, dict[str, int]]) -> int:
    return sum(c.get("pfc3_tx_pkts", 0) for c in counters.values())


# 1 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("payload", [4096, 1024])
@pytest.mark.parametrize("kind", ["single_switch", "leaf_spine"])
def test_single_flow_reaches_line_rate_times_header_efficiency(payload: int, kind: str) -> None:
    # [ROCE]: goodput = line rate x payload / (payload + 62 header + 20 preamble/IFG bytes).
    topo = Topology(kind=kind, leaves=2, spines=2, hosts_per_leaf=2, payload_bytes=payload)
    fab = Fabric(topo)
    dst, src = fab.nic_names[0], fab.nic_names[-1]
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, 1, [dst, src])]),
                     max_time_us=3000)
    rate = _window_rates(sim, 1000, 2000)[0]
    expected = 100.0 * payload / (payload + 82)
    assert rate == pytest.approx(expected, rel=0.02)
    assert topo.efficiency == pytest.approx(payload / (payload + 82))


# 2 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 8, 16])
def test_incast_with_dcqcn_is_efficient_fair_and_lossless(n: int) -> None:
    # [DCQCN] §5-6: N:1 incast under DCQCN keeps the bottleneck busy, converges to a fair
    # share and holds a standing queue between Kmin and Kmax with no drops and no PFC.
    # Fairness over one 10-ms window moves with the seed (8:1, seeds 0-4: Jain 0.898, 0.912,
    # 0.935, 0.962, 0.958), so it is the mean over three seeds that must be fair.
    topo = Topology(kind="single_switch", hosts_per_leaf=n + 1)
    fab = Fabric(topo)
    fab.set_ecn("sw0", MODERATE)
    jains = []
    for seed in (1, 2, 0):  # seed 0 last: its run is the one checked below
        sim = Simulation(fab, Workload(background=[Background("incast", 1.0, n)]),
                         max_time_us=20_000, seed=seed)
        rates = _window_rates(sim, 10_000, 10_000)
        jains.append(_jain(rates))
        assert rates.sum() / (100.0 * topo.efficiency) >= 0.95
    res = sim.result()
    assert np.mean(jains) >= 0.9
    ts = res.timeseries
    q = ts["queue_bytes"][ts["t_us"] > 10_000]
    assert res.timeseries_port == "sw0/Ethernet0"  # the incast receiver's port
    assert MODERATE.kmin_bytes <= q.mean() <= MODERATE.kmax_bytes
    c = res.counters["sw0/Ethernet0"]
    assert c["queue3_drop_pkts"] == 0 and _pfc_frames(res.counters) == 0
    assert c["queue3_ecn_marked_pkts"] > 0


# 3 ------------------------------------------------------------------------------------------
def _one_flow(cfg: DcqcnConfig) -> Simulation:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=2))
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    for nic in fab.nic_names:
        fab.set_dcqcn(nic, cfg)
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, 1)]),
                     dt_us=1.0, max_time_us=50_000)
    sim.advance(100)
    return sim


def test_first_cnp_halves_a_line_rate_flow() -> None:
    # [DCQCN] RP: RC <- RC (1 - alpha/2) with alpha ~ 1 at the first CNP; [CX] rpg_gd = 11
    # means a cut of alpha * 2^(10-11) = alpha/2, initial_alpha_value = 1023/1024. The cut
    # comes at the first tick of the rate-decrease timer, one rate_reduce_monitor_period (4 µs)
    # after the CNP ([CX] mlxconfig RPG_GD: "reduced at the beginning of the next
    # rate_reduce_monitor_period interval"); rate_to_set_on_first_cnp = 0 keeps the rate.
    sim = _one_flow(DcqcnConfig())
    assert sim.flow_stats()["rate_gbps"][0] == pytest.approx(100.0)
    sim.inject_cnp(0)
    sim.advance(4)
    assert sim.flow_stats()["rate_gbps"][0] == pytest.approx(100.0)
    sim.advance(1)
    fs = sim.flow_stats()
    alpha = 1023 / 1024 * (1 - 5 / 1024) ** 5  # 5 decays (dce_tcp_g 1019) before the tick
    assert fs["rate_gbps"][0] == pytest.approx(100.0 * (1 - alpha / 2), rel=0.001)
    assert fs["alpha"][0] == pytest.approx(alpha, abs=0.001)
    assert sim.counters()["host1/mlx5_0"]["rp_cnp_handled"] == 1


def test_cuts_never_closer_than_rate_reduce_monitor_period() -> None:
    # [CX] rate_reduce_monitor_period: at most one rate cut per period, whatever the CNP rate.
    sim = _one_flow(DcqcnConfig(rate_reduce_monitor_period=10))
    cut_times = []
    prev = sim.flow_stats()["rate_gbps"][0]
    for step in range(105):
        sim.inject_cnp(0)
        sim.advance(1)
        rate = sim.flow_stats()["rate_gbps"][0]
        if rate < prev - 1e-9:
            cut_times.append(step)
        prev = rate
    gaps = np.diff(cut_times)
    assert len(cut_times) == 10  # ticks 10, 20, .., 100 µs after the first CNP
    assert gaps.min() >= 10


def test_clamped_flow_regains_only_hai_per_time_reset_in_hyper_increase() -> None:
    # [CX] factory timers: rpg_time_reset = 300 µs, rpg_hai_rate = 50 Mb/s, rpg_threshold = 1.
    # With clamp_tgt_rate the target follows every cut, so in hyper increase (timer stage past
    # F; byte counter disabled so the timer alone drives the stages) the rate gains ~50 Mb/s
    # per 300 µs: recovering 10 Gb/s takes ~60 ms - the "slow recovery" of the field.
    sim = _one_flow(DcqcnConfig(clamp_tgt_rate=1, rpg_byte_reset=0))
    for _ in range(12):  # cut 100G down to ~1-2 Gb/s
        sim.inject_cnp(0)
        sim.advance(5)
    sim.advance(300 * 3)  # timer events 1 (fast recovery, stage <= F), 2 and 3 (hyper)
    r0 = sim.flow_stats()["rate_gbps"][0]
    assert r0 < 5.0
    sim.advance(300 * 10)
    gain_mbps = (sim.flow_stats()["rate_gbps"][0] - r0) * 1e3
    assert gain_mbps == pytest.approx(10 * 50, rel=0.05)
    # With the factory byte counter too, a flow clamped near 0.2 Gb/s still needs > 10 ms to
    # climb back above 10 Gb/s (byte events only become frequent as the rate grows).
    sim = _one_flow(DcqcnConfig(clamp_tgt_rate=1))
    for _ in range(10):
        sim.inject_cnp(0)
        sim.advance(5)
    assert sim.flow_stats()["rate_gbps"][0] < 0.3
    sim.advance(10_000)
    assert sim.flow_stats()["rate_gbps"][0] < 10.0


def test_byte_counter_and_timer_drive_recovery() -> None:
    # [DCQCN] Fig. 6 / [CX]: increase events come from a byte counter (rpg_byte_reset bytes) and
    # a timer (rpg_time_reset µs). After one cut from line rate (target stays at line rate) the
    # first event is fast recovery, RC <- (RT + RC) / 2, later ones (additive increase) halve
    # the gap too. At 50 Gb/s the default 32767-byte counter fires after 5.2 µs, at 75 Gb/s
    # after 3.5 µs: 87.5 Gb/s ~9 µs after the cut, > 99 Gb/s within 30 µs. With the byte
    # counter disabled only the 300 µs timer can raise the rate.
    fast = _one_flow(DcqcnConfig())
    fast.inject_cnp(0)
    fast.advance(5)  # the cut: 4 µs after the CNP (see test_first_cnp_halves_a_line_rate_flow)
    assert fast.flow_stats()["rate_gbps"][0] == pytest.approx(50.0, rel=0.03)
    fast.advance(10)
    assert fast.flow_stats()["rate_gbps"][0] == pytest.approx(87.5, rel=0.01)
    fast.advance(20)
    assert fast.flow_stats()["rate_gbps"][0] > 99.0
    slow = _one_flow(DcqcnConfig(rpg_byte_reset=0))
    slow.inject_cnp(0)
    slow.advance(5 + 298)
    assert slow.flow_stats()["rate_gbps"][0] == pytest.approx(50.0, rel=0.03)
    slow.advance(2)  # the 300 µs timer fires once: fast recovery halfway back to 100G
    assert slow.flow_stats()["rate_gbps"][0] == pytest.approx(75.0, rel=0.01)


# 4 ------------------------------------------------------------------------------------------
def _ecn_before_pfc(ecn: EcnConfig) -> tuple[int, float, Fabric]:
    """3:1 incast from leaf1 to host0 plus a victim host7 -> host1 that shares only the
    leaf1 uplink and the spine->leaf0 link with it (one spine; 400G uplinks, so the only
    congestion point is leaf0 -> host0)."""
    fab = Fabric(Topology(leaves=2, spines=1, hosts_per_leaf=4, uplink_gbps=400))
    for s in fab.switch_names:
        fab.set_ecn(s, ecn)
    n = fab.nic_names
    wl = Workload(background=[Background("incast", 1.0, 3, [n[0], n[4], n[5], n[6]]),
                              Background("incast", 1.0, 1, [n[1], n[7]])])
    sim = Simulation(fab, wl, max_time_us=10_000)
    rates = _window_rates(sim, 5_000, 5_000)
    return _pfc_frames(sim.counters()), float(rates[3]), fab


def test_ecn_before_pfc_keeps_pauses_away_and_protects_victims() -> None:
    # [PFC]/[DCQCN] §3: ECN must act before PFC; when it does not, pauses spread upstream and
    # a flow that shares only an upstream link with the incast is blocked (HoL).
    good_pfc, good_victim, fab = _ecn_before_pfc(MODERATE)
    assert MODERATE.kmax_bytes < fab.xoff_bytes("leaf0") / 10
    off_pfc, off_victim, _ = _ecn_before_pfc(EcnConfig(enabled=False))
    x = fab.xoff_bytes("leaf0")
    late_pfc, late_victim, _ = _ecn_before_pfc(EcnConfig(int(1.2 * x), int(2 * x), 0.05))
    assert good_pfc <= 10
    assert off_pfc >= 100 * max(good_pfc, 1) and late_pfc >= 100 * max(good_pfc, 1)
    assert good_victim > 0.95 * 100 * fab.topo.efficiency
    assert off_victim < 0.6 * good_victim
    assert late_victim < 0.9 * good_victim


@pytest.mark.parametrize("n", [2, 4])
def test_pfc_fires_where_the_dynamic_threshold_model_says(n: int) -> None:
    # SAI saibuffer.h SHARED_DYNAMIC_TH: a PG pauses above 2^th x the pool's free buffer. With
    # ECN off, n senders fill one egress queue until their PGs cross alpha x (B - n s): the
    # queue stops at Fabric.pfc_onset_bytes (the bound safety.limits.PfcThreshold puts on
    # Kmax) plus what is in flight when XOFF lands, not at one port's XOFF (xoff_bytes).
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=n + 1, buffer_bytes=4 * 2**20))
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, n)]),
                     max_time_us=3_000)
    sim.advance(3_000)
    counters = sim.counters()
    wm = max(c.get("queue3_watermark_bytes", 0) for p, c in counters.items()
             if p.startswith("sw0/"))
    onset = fab.pfc_onset_bytes("sw0", n)
    assert _pfc_frames(counters) > 0
    assert onset <= wm <= 1.05 * onset
    assert wm > 1.5 * fab.xoff_bytes("sw0")
    assert fab.congesting_fan_in("sw0") == 2  # one link speed: two senders congest a port


# 5 ------------------------------------------------------------------------------------------
def _incast_200g(ecn: EcnConfig, n: int, dcqcn: DcqcnConfig, nic_gbps: float = 200.0,
                 ) -> tuple[float, float, int]:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=n + 1, nic_gbps=nic_gbps))
    fab.set_ecn("sw0", ecn)
    for nic in fab.nic_names:
        fab.set_dcqcn(nic, dcqcn)
    wl = Workload(background=[Background("incast", 1.0, n)],
                  probes=Probes(pairs=4, interval_us=20, nics=fab.nic_names[:2]))
    sim = Simulation(fab, wl, max_time_us=10_000)
    total = float(_window_rates(sim, 5_000, 5_000).sum())
    res = sim.result()
    steady = res.latency_us[res.latency_t_us >= 5_000]  # after the start-up transient
    return total, float(np.percentile(steady, 99)), _pfc_frames(res.counters)


def test_aggressive_marking_with_slow_recovery_wastes_half_a_200g_nic() -> None:
    # Field story (issue #2; [DCQCN] §6 on Kmin/Pmax): Kmin ~ 1 KB, Kmax ~ 10 KB, Pmax 100 %
    # marks on every microburst; with slow recovery a 200G port delivers a fraction of line.
    # The packet-level reference puts 4:1 at 200G with every packet above 1 KB marked at
    # steady util 0.589 (inc4_200g_kC_mlx, tests/rocesim/fixtures/packet_level).
    slow = DcqcnConfig(rpg_byte_reset=0)
    aggressive, _, _ = _incast_200g(EcnConfig(1_000, 10_000, 1.0), 4, slow)
    moderate, _, _ = _incast_200g(MODERATE, 4, slow)
    assert aggressive < 0.6 * 200
    assert moderate > 0.9 * 200 * 4096 / 4178


def test_conservative_marking_raises_latency_and_pfc() -> None:
    # [DCQCN] §3/§6: thresholds near the XOFF point let queues grow until PFC fires: p99
    # latency and pause frames rise compared with moderate thresholds.
    # 2:1 incast at 100G: each ingress port reaches XOFF at ~1/(1 + 2 alpha) of the dynamic
    # threshold, i.e. a ~6 MB egress queue, inside [Kmin, Kmax] = [XOFF, 2 XOFF].
    xoff = Fabric(Topology(kind="single_switch")).xoff_bytes("sw0")
    conservative = EcnConfig(xoff, 2 * xoff, 0.05)
    _, p99_mod, pfc_mod = _incast_200g(MODERATE, 2, DcqcnConfig(), nic_gbps=100.0)
    _, p99_con, pfc_con = _incast_200g(conservative, 2, DcqcnConfig(), nic_gbps=100.0)
    assert p99_con > 10 * p99_mod
    assert pfc_mod == 0 and pfc_con >= 100


# 6 ------------------------------------------------------------------------------------------
def test_alltoall_suffers_ecmp_collisions_and_ring_allreduce_does_not() -> None:
    # ECMP hashing per flow (RFC 2992 hash-threshold; [DCQCN] §2 on ECMP collisions): on a 1:1
    # leaf-spine, AlltoAll loads every uplink, so collisions leave some uplinks >= 50 % above
    # the mean and make the collective slower for some placements. A ring AllReduce crosses
    # the leaf boundary with only 2 x channels flows, each paced by the ring at 1/channels
    # of a NIC: its uplink bytes are lumpy too, but no uplink is ever overloaded, so its time
    # does not depend on the placement. (The "ring does not show uneven load" holds for
    # load relative to capacity, which is what this test checks.)
    topo = Topology(leaves=2, spines=4, hosts_per_leaf=4)
    a2a_ratio, a2a_time, ring_time, ring_util = [], [], [], []
    for seed in range(6):
        fab = Fabric(topo, seed=seed)
        a2a = simulate(fab, Workload(collectives=[Collective("alltoall", 4 * 2**20,
                                                             fab.nic_names, iterations=2)]),
                       seed=seed)
        up = np.array(list(a2a.uplink_bytes.values()), dtype=float)
        a2a_ratio.append(up.max() / up.mean())
        a2a_time.append(np.mean(a2a.collectives[0].iteration_times_us))
        ring = simulate(fab, Workload(collectives=[Collective("all_reduce", 4 * 2**20,
                                                              fab.nic_names, iterations=2)]),
                        seed=seed)
        t = ring.sim_time_us
        ring_time.append(np.mean(ring.collectives[0].iteration_times_us))
        ring_util.append(max(ring.uplink_bytes.values()) / (topo.uplink_gbps * 1e3 / 8 * t))
    assert max(a2a_ratio) >= 1.5
    assert max(a2a_time) >= 1.1 * min(a2a_time)
    assert max(ring_time) <= 1.01 * min(ring_time)
    assert max(ring_util) <= 0.75  # 4 channels x 25G crossing: at most 3 share an uplink


# 7 ------------------------------------------------------------------------------------------
def _quick(seed: int, fabric_seed: int | None = None):
    fab = Fabric(Topology(), seed=seed if fabric_seed is None else fabric_seed)
    fab.set_ecn("leaf0", MODERATE)
    wl = Workload(collectives=[Collective("all_reduce", 2 * 2**20, fab.nic_names, iterations=2),
                               Collective("alltoall", 2**20, fab.nic_names, iterations=2)],
                  probes=Probes(pairs=4, interval_us=20))
    sim = Simulation(fab, wl, seed=seed)
    return sim, sim.run()


def test_same_seed_same_results_different_seed_different_ecmp() -> None:
    # Determinism is a requirement of issue #2 (reproducible trials).
    sim_a, a = _quick(3)
    sim_b, b = _quick(3)
    assert a.counters == b.counters
    assert [c.iteration_times_us for c in a.collectives] == \
        [c.iteration_times_us for c in b.collectives]
    assert np.array_equal(a.latency_us, b.latency_us)
    assert a.uplink_bytes == b.uplink_bytes
    sim_c, c = _quick(4)
    assert not np.array_equal(sim_a.f_path, sim_c.f_path)
    assert a.uplink_bytes != c.uplink_bytes
    # the fabric's hash salt alone also moves flows
    sim_d, _ = _quick(3, fabric_seed=99)
    assert not np.array_equal(sim_a.f_path, sim_d.f_path)


# 8 ------------------------------------------------------------------------------------------
def _ensemble(dt: float, seeds: range) -> tuple[float, float]:
    bus: list[float] = []
    lat: list[np.ndarray] = []
    for seed in seeds:
        fab = Fabric(Topology(), seed=seed)
        wl = Workload(collectives=[Collective("all_reduce", 8 * 2**20, fab.nic_names),
                                   Collective("alltoall", 4 * 2**20, fab.nic_names)],
                      probes=Probes(pairs=16, interval_us=10))
        r = simulate(fab, wl, seed=seed, dt_us=dt)
        bus.extend(c.busbw_gbytes_per_s for c in r.collectives)
        lat.append(r.latency_us)
    return float(np.mean(bus)), float(np.percentile(np.concatenate(lat), 99))


def test_default_step_is_converged() -> None:
    # Issue #2 engine rule: halving the step moves busbw and p99 by less than 2 %
    # (p99 pooled over seeds: a single run's p99 is a noisy tail statistic).
    # Measured over 48 seeds: dt 1 -> 0.5 µs moves busbw 0.08 % and the pooled p99 0.7 %. The
    # p99 of seeds 0-23 alone moved 2.2 %, of seeds 24-47 0.5 % (their pooled p99s are 83 and
    # 123 µs): seed noise of the tail, which is why the test pools 48 placements.
    bus1, p99_1 = _ensemble(DEFAULT_DT_US, range(48))
    bus2, p99_2 = _ensemble(DEFAULT_DT_US / 2, range(48))
    assert bus2 == pytest.approx(bus1, rel=0.02)
    assert p99_2 == pytest.approx(p99_1, rel=0.02)


# extra ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "alltoall"])
def test_uncontended_busbw_equals_link_goodput(op: str) -> None:
    # [NCCL] PERFORMANCE.md: busbw is normalised so that it "reflects how optimally the
    # hardware is used" - on a non-blocking fabric it approaches the per-rank link bandwidth
    # (here 100 Gb/s x 4096/4178 = 12.25 GB/s), whatever the collective.
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=8))
    res = simulate(fab, Workload(collectives=[Collective(op, 16 * 2**20, fab.nic_names,
                                                         iterations=2)]))
    goodput = 100e9 / 8 * fab.topo.efficiency / 1e9
    assert res.collectives[0].busbw_gbytes_per_s == pytest.approx(goodput, rel=0.05)
    assert res.collectives[0].busbw_gbytes_per_s <= goodput


def test_more_qps_per_connection_spread_alltoall_over_the_spines() -> None:
    # ECMP hashes each QP's UDP source port: more QPs per connection (NCCL_IB_QPS_PER_CONNECTION)
    # means more, smaller flows, so the busiest uplink comes closer to the mean.
    topo = Topology(leaves=2, spines=4, hosts_per_leaf=4)

    def imbalance(qps: int) -> float:
        ratios = []
        for seed in range(6):
            fab = Fabric(topo, seed=seed)
            res = simulate(fab, Workload(collectives=[Collective(
                "alltoall", 2**20, fab.nic_names, iterations=1, qps_per_connection=qps)]),
                seed=seed)
            up = np.array(list(res.uplink_bytes.values()), dtype=float)
            ratios.append(up.max() / up.mean())
        return float(np.mean(ratios))

    one, eight = imbalance(1), imbalance(8)
    assert eight < one
    assert eight < 1.3
