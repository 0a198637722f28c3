"""Time-stepped engine: builds the state arrays, steps the compiled kernel, reports results.

What one step (``dt_us``, default ``DEFAULT_DT_US``) does, in order (the phase functions that
``_kernel.run`` calls):

1. bytes that left a link ``delay`` steps ago arrive: into the next switch egress queue
   (per-(ingress port, priority) buffer accounting; headroom overflow drops the lossless
   class, the dynamic threshold drops the lossy class) or at the receiver, which (with
   ``Topology.ack_bytes`` > 0) acknowledges them on the reverse path: ACK flows share the data
   queues and PFC of their class in the switches and get no CNPs;
2. the receiver NIC (notification point) turns CE-marked packets into CNPs, at most one per
   ``min_time_between_cnps`` µs from the port or, with ``cnp_moderation`` = 2, from each flow
   (0 µs: one per marked packet); a mark reaches the NP
   after the remaining forward propagation delay plus the downstream queues' current delay
   (bounded by a ring of a few hundred µs) and the CNP reaches the sender after the reverse
   propagation delay. CNPs ride their own strict-priority class (``cnp_802p_prio``, factory
   6), which is never paused and whose bytes are negligible, so they are modelled as delay
   only; sent in the data's priority, they also wait out the current delay of the switch
   queues on the flow's ACK path (same ring bound);
3. the sender NIC (reaction point) runs DCQCN per flow with ConnectX semantics; every
   ``dce_tcp_rtt`` µs α <- (1 - g) α, plus g if a CNP arrived, g = (1024 - ``dce_tcp_g``)/1024
   (``Topology.dce_tcp_g_reading`` "kept"), or ``dce_tcp_g``/1024 ("vendor", mstflint's text)
   (see ``_kernel.rp_cnp``, ``rp_alpha``, ``rp_rate`` and ``_increase``); the first CNP
   starts the α and rate-decrease timers, a cut happens at a decrease-timer tick that follows
   a CNP;
4. PFC per switch ingress port and priority: XOFF above min(static, alpha x free shared
   buffer), XON ``resume_offset`` below; one pause frame at XOFF, one per refresh period
   (half the 0xFFFF-quanta pause time) while XOFF lasts and one XON (zero-quanta) frame; the
   upstream egress (switch port or NIC) stops serving that priority one link delay later;
5. every link serves its queues: strict priority for CNPs, work-conserving WRR between the two
   data classes, FIFO inside a class approximated as fluid service proportional to each flow's
   backlog (shares follow arrival rates, as in a FIFO);
6. packets dequeued from a switch queue are CE-marked with the RED probability of the queue a
   packet sees (fluid queue averaged over the step plus a packet-level microburst backlog, see
   ``_kernel._burst_params``), one Bernoulli draw per whole packet;
7. NICs inject each flow at min(DCQCN rate, offered load, ring credit), sharing the port
   max-min between QPs (the NIC's arbiter) and stopping while the port is paused;
8. probes advance through the queues: the bytes ahead of them (fluid queue + a sampled
   microburst) drain first, pauses included.

Not modelled: retransmission timing (go-back-N / selective repeat: a dropped byte is simply
sent again, without a timeout), NIC receive-side pauses (host PCIe back-pressure; NIC
``tx_prio3_pause`` stays 0), adaptive routing and flowlets, PFC deadlocks, PFC watchdog actions
(storms are reported, not acted upon), queueing of CNPs behind other CNPs, multicast, the
NIC scheduler's per-packet jitter, GPU/NVLink time; DCQCN limiter de-allocation only with
``Topology.release_limiter`` (off by default).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from rocesim import _kernel as K
from rocesim import _state as S
from rocesim._compile import two_processes
from rocesim.config import FIXED_UDP_SPORT
from rocesim.fabric import OTHER_LOSSLESS_TC, OTHER_LOSSY_TC, ROCE_TC, Fabric
from rocesim.workload import (
    ROCE_DSCP,
    Collective,
    Workload,
    busbw_factor,
    double_binary_tree,
    tree_chunk_bytes,
)


@functools.lru_cache(maxsize=8)
def _burst_tables(n_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_kernel.burst_table`` for marking and for a random instant, and the latter's mean as a
    compact table: once per process and size (every Simulation reads them, none writes)."""
    work = K.burst_table(n_max, 0)
    return K.burst_table(n_max, 1), work, np.ascontiguousarray(work[:, :, 0])


DEFAULT_DT_US = 1.0  # chosen by the convergence test (tests/rocesim/test_physics.py, #8)
NO_COLLECTIVE_TIME_US = 10_000.0
COLLECTIVE_TIME_CAP_US = 1_000_000.0
TS_POINTS = 2000


@dataclass
class CollectiveStats:
    """nccl-tests style numbers of one collective (GB/s = 1e9 bytes/s)."""

    name: str
    op: str
    size_bytes: int
    ranks: int
    iteration_times_us: list[float]
    algbw_gbytes_per_s: float
    busbw_gbytes_per_s: float
    completed: bool


@dataclass
class SimResult:
    """Everything a run reports; plain data, no printing."""

    collectives: list[CollectiveStats]
    latency_us: np.ndarray
    p50_us: float
    p99_us: float
    p999_us: float
    counters: dict[str, dict[str, int]]
    uplink_bytes: dict[str, int]
    storms: list[tuple[str, int, float]]
    sim_time_us: float
    wall_s: float
    steps: int
    dt_us: float
    seed: int
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    timeseries_port: str = ""
    latency_t_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # probe send times
    flows: dict[str, np.ndarray] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly summary (no per-sample arrays)."""
        return {
            "collectives": [c.__dict__ for c in self.collectives],
            "latency": {"samples": int(self.latency_us.size), "p50_us": _f(self.p50_us),
                        "p99_us": _f(self.p99_us), "p999_us": _f(self.p999_us)},
            "counters": self.counters,
            "uplink_bytes": self.uplink_bytes,
            "storms": [list(s) for s in self.storms],
            "sim_time_us": self.sim_time_us,
            "wall_s": self.wall_s,
            "steps": self.steps,
            "dt_us": self.dt_us,
            "seed": self.seed,
            "timeseries_port": self.timeseries_port,
        }


def _f(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _mbps(x: float) -> float:
    """Mbit/s -> bytes/µs."""
    return x / 8.0


class Simulation:
    """A run that can be stepped (for live monitoring) or run to the end.

    Settings are read from the fabric when the simulation is built; later ``set_ecn`` /
    ``set_dcqcn`` calls affect new simulations only.
    """

    def __init__(self, fabric: Fabric, workload: Workload, seed: int = 0,
                 dt_us: float | None = None, max_time_us: float | None = None) -> None:
        self.fabric = fabric
        self.workload = workload
        self.seed = int(seed)
        self.dt = float(dt_us if dt_us is not None else DEFAULT_DT_US)
        if not 0.0 < self.dt <= 1.0:
            raise ValueError(f"dt_us must be in (0, 1] µs, got {self.dt}")
        if max_time_us is None:
            max_time_us = COLLECTIVE_TIME_CAP_US if workload.collectives \
                else NO_COLLECTIVE_TIME_US
        self.max_steps = int(math.ceil(max_time_us / self.dt - 1e-9))
        self._rs = np.random.default_rng([self.seed, 0x5EED])
        self.t = 0
        self.wall_s = 0.0
        self._build()

    # ---------------------------------------------------------------- construction
    def _build(self) -> None:
        fab, topo, dt = self.fabric, self.fabric.topo, self.dt
        links = fab.links
        n_links = len(links)
        sw_idx = {n: i for i, n in enumerate(fab.switch_names)}
        nic_idx = {n: i for i, n in enumerate(fab.nic_names)}
        self.l_cap = np.array([ln.gbps * 1e3 / 8.0 for ln in links])
        self.l_delay = np.array([max(1, int(round(topo.link_delay_us / dt))) for _ in links],
                                dtype=np.int64)
        self.l_dst_sw = np.array([sw_idx.get(ln.dst, -1) for ln in links], dtype=np.int64)
        self.l_src_nic = np.array([nic_idx.get(ln.src, -1) for ln in links], dtype=np.int64)
        self.l_hroom = np.array([float(topo.headroom_for(ln.gbps)) for ln in links])
        self.l_refresh = np.array([topo.refresh_us(ln.gbps) for ln in links])
        other_lossless = any(b.priority == "other" and b.lossless
                             for b in self.workload.background)
        self.cls_tc = (ROCE_TC, OTHER_LOSSLESS_TC if other_lossless else OTHER_LOSSY_TC)
        self.cls_lossless = np.array([1, 1 if other_lossless else 0], dtype=np.int64)
        self.l_ecn = np.zeros((n_links, 2, 4))
        for li, ln in enumerate(links):
            if ln.src in sw_idx:
                for c, tc in enumerate(self.cls_tc):
                    e = fab.ecn(ln.src, tc)
                    self.l_ecn[li, c] = (e.kmin_bytes, e.kmax_bytes, e.pmax,
                                         1.0 if e.enabled else 0.0)
        self.l_counters = np.zeros((n_links, 2, S.NLC))
        self.l_counters[:, :, S.C_STORM] = -1.0
        self.q = np.zeros((n_links, 2))
        self.ing = np.zeros((n_links, 2))
        self.xoff = np.zeros((n_links, 2), dtype=np.int64)
        self.xoff_thr = np.zeros((n_links, 2))
        self.arr_lim = np.zeros((n_links, 2))  # set by _kernel.arrival_limits
        ring = int(self.l_delay.max()) + 1
        self.xoff_hist = np.zeros((ring, n_links, 2), dtype=np.int8)
        self.next_refresh = np.zeros((n_links, 2))
        self.paused_since = np.full((n_links, 2), -1.0)
        n_sw = len(fab.switch_names)
        self.sw_buffer = np.array([float(fab.buffer_bytes(sw)) for sw in fab.switch_names])
        self.sw_params = (float(topo.reserve_bytes), float(topo.resume_offset_bytes),
                          2.0 ** topo.pfc_alpha_log2,
                          float(topo.pfc_static_xoff_bytes or 0.0),
                          2.0 ** topo.lossy_alpha_log2)
        # NIC DCQCN parameters in kernel units
        n_nics = len(fab.nic_names)
        line = topo.nic_gbps * 1e3 / 8.0
        self.npar = np.zeros((n_nics, S.NP_COLS))
        for i, nic in enumerate(fab.nic_names):
            d = fab.dcqcn(nic)
            p = self.npar[i]
            p[S.P_TIME_RESET] = d.rpg_time_reset
            p[S.P_BYTE_RESET] = d.rpg_byte_reset
            p[S.P_THRESHOLD] = d.rpg_threshold
            p[S.P_MAX_RATE] = min(line, _mbps(d.rpg_max_rate)) if d.rpg_max_rate else line
            p[S.P_AI] = _mbps(d.rpg_ai_rate)
            p[S.P_HAI] = _mbps(d.rpg_hai_rate)
            p[S.P_GD_FAC] = 2.0 ** (10 - d.rpg_gd)
            p[S.P_MIN_DEC] = d.rpg_min_dec_fac / 100.0
            p[S.P_MIN_RATE] = _mbps(d.rpg_min_rate)
            p[S.P_FIRST_RATE] = _mbps(d.rate_to_set_on_first_cnp)
            # the gain g of alpha <- (1 - g) alpha + g [a CNP in the period], per the fabric's
            # reading of dce_tcp_g (Topology.dce_tcp_g_reading): "kept", the share of alpha
            # kept (g = (1024 - G)/1024, factory 1019 -> 5/1024 ~ the paper's 1/256), or
            # "vendor", mstflint's DCE_TCP_G text (g = G/1024)
            p[S.P_G] = (d.dce_tcp_g if topo.dce_tcp_g_reading == "vendor"
                        else 1024 - d.dce_tcp_g) / 1024.0
            p[S.P_ALPHA_RTT] = d.dce_tcp_rtt
            p[S.P_RRMP] = d.rate_reduce_monitor_period
            p[S.P_INIT_ALPHA] = d.initial_alpha_value / 1024.0
            p[S.P_CLAMP] = d.clamp_tgt_rate
            p[S.P_CLAMP_TI] = d.clamp_tgt_rate_after_time_inc
            p[S.P_MIN_CNP_GAP] = d.min_time_between_cnps
            p[S.P_LINE] = line
            p[S.P_CNP_PER_PORT] = 1.0 if d.cnp_moderation == 1 else 0.0
            p[S.P_RELEASE] = 1.0 if topo.release_limiter else 0.0
        self.nic_ctr = np.zeros((n_nics, 3), dtype=np.int64)
        self.nic_tcnp = np.full(n_nics, -1e18)
        self._build_flows(line)
        self._build_probes()
        self.serve_frac = np.zeros((n_links, 2))
        self.serve_bytes = np.zeros((n_links, 2))
        self.nic_tot = np.zeros((n_links, 2))
        self.nic_nq = np.zeros(n_links)
        self.sh_used = np.zeros(n_sw)
        self.slot_out = np.zeros(n_links, dtype=np.uint32)
        self.slot_hist = np.zeros(n_links, dtype=np.uint32)
        self.pmark = np.zeros((n_links, 2))
        self.qprev = np.zeros((n_links, 2))
        self.qseen = np.zeros((n_links, 2))
        self.nfl = np.zeros((n_links, 2), dtype=np.int64)
        # microburst law up to the most ingress ports any egress queue can have
        in_deg = np.bincount(self.l_dst_sw[self.l_dst_sw >= 0], minlength=1)
        n_max = int(min(K.BURST_N_CAP, max(2, int(in_deg.max(initial=0)))))
        # stand-ins of the burst tables' types: a cold cache's first compile starts from the
        # structures' types (rocesim._compile), and the tables come from a compiled function
        self.btail = self.bwork = np.zeros((1, 1, 1))
        self.bmean = np.zeros((1, 1))
        self.burst = np.zeros((n_links, 2, 4))
        self.ts_every = np.array([1], dtype=np.int64)
        self.ts_n = np.zeros(1, dtype=np.int64)
        self.ts_t = np.zeros(TS_POINTS)
        self.ts_q = np.zeros((TS_POINTS, n_links), dtype=np.float32)
        self.ts_paused = np.zeros((TS_POINTS, n_links), dtype=np.int8)
        self.ts_rate = np.zeros((TS_POINTS, n_links), dtype=np.float32)
        self.lrate = np.zeros((n_links, 2))
        self.rng = np.array([np.uint64(self._rs.integers(0, 2**63))], dtype=np.uint64)
        self._table_of: object = None  # the structures ``self._table`` was written from
        self._table: tuple[np.ndarray, object] = (np.zeros((1, 1), np.int64), None)
        with two_processes(self):  # the first compile, on two cores (no-op on a warm cache)
            self.btail, self.bwork, self.bmean = _burst_tables(n_max)
            self.state = self._pack()
            K.arrival_limits(self.state[0], self.state[1])
            fl = self.state[3]
            K.count_ingress(fl.live, np.int64(fl.n_live[0]), fl.hops, fl.path, fl.pair, fl.cls,
                            fl.pair_stamp, self.nfl, -(2**62))

    def _pack(self) -> tuple[S.LinkState, S.SwitchState, S.NicState, S.FlowState,
                             S.GroupState, S.ProbeState, S.SeriesState, S.Scratch]:
        """The kernel's named structures, by keyword (they share the arrays above).

        Arrays of non-negative indices reach the kernel as unsigned views: numba indexes with
        a signed integer only after testing it for a negative (wrap-around) value, which cost
        up to half the time of the per-flow loops."""
        def u32(a: np.ndarray) -> np.ndarray:
            return a.view(np.uint32)

        def narrow(a: np.ndarray, top: int) -> np.ndarray:
            """A constant per-flow index array in 8 bits (hop counts, classes) or, for link ids, 16
            bits if they fit (one compiled kernel for all but huge fabrics); -1 entries past a
            path's last hop wrap to the type's maximum and are never read. The step is
            memory-bound on large fabrics."""
            t = np.uint8 if top < 8 else np.uint16 if top < 65535 else np.uint32
            return a.astype(t)

        topo = self.fabric.topo
        reserve, resume, a_x, s_x, a_l = self.sw_params
        links = S.LinkState(
            cap=self.l_cap, delay=self.l_delay, dst_sw=self.l_dst_sw, src_nic=self.l_src_nic,
            hroom=self.l_hroom, refresh=self.l_refresh, ecn=self.l_ecn,
            counters=self.l_counters, q=self.q, ing=self.ing, xoff=self.xoff,
            xoff_thr=self.xoff_thr, xoff_hist=self.xoff_hist, next_refresh=self.next_refresh,
            paused_since=self.paused_since, qprev=self.qprev, nfl=self.nfl,
            arr_lim=self.arr_lim)
        switches = S.SwitchState(
            buffer=self.sw_buffer, sh_used=self.sh_used, reserve=reserve, resume=resume,
            alpha_xoff=a_x, static_xoff=s_x, alpha_lossy=a_l, cls_lossless=self.cls_lossless,
            n_cls=2 if self._class1_used() else 1,
            w_roce=float(topo.wrr_weight_roce), wd_detect=float(topo.pfcwd_detect_us),
            wire_pkt=float(topo.wire_bytes), ack_ratio=topo.ack_bytes / topo.wire_bytes,
            ack_pkt=float(max(1, topo.ack_packet_bytes)), btail=self.btail, bwork=self.bwork,
            bmean=self.bmean)
        nics = S.NicState(par=self.npar, tcnp=self.nic_tcnp, ctr=self.nic_ctr)
        flows = S.FlowState(
            path=narrow(self.f_path, len(self.fabric.links)),
            hops=narrow(self.f_hops, topo.path_width),
            cls=narrow(self.f_cls, 1), src=u32(self.f_src),
            dst=u32(self.f_dst), pred=self.f_pred, pred2=self.f_pred2, ack=self.f_ack,
            group=self.f_group, rd=self.f_rd,
            rev=self.f_rev, cpath=narrow(self.f_cpath, len(self.fabric.links)),
            chops=narrow(self.f_chops, topo.path_width), cap=self.f_cap, size=self.f_size,
            chunk=self.f_chunk, quantum=self.f_quantum,
            pair=u32(self.f_pair), ff=self.ff, fi=self.fi, back=self.back, pacc=self.pacc,
            transit=self.transit, ce_ring=self.ce_ring, cnp_ring=self.cnp_ring,
            ce_count=self.ce_count, cnp_count=self.cnp_count, n_active=self.n_active,
            live=u32(self.live), n_live=self.n_live, pair_stamp=self.pair_stamp,
            nic_idx=u32(self.nic_idx), nic_ptr=self.nic_ptr)
        groups = S.GroupState(
            iters=self.g_iters, iter=self.g_iter, start=self.g_start, times=self.g_times,
            f0=self.g_f0a, f1=self.g_f1a, cur=self.g_cur)
        probes = S.ProbeState(
            path=self.p_path, hops=self.p_hops, back=self.p_back, wire=float(self.p_wire),
            ack_wire=float(max(1, topo.ack_packet_bytes)),
            interval=float(self.p_interval), next=self.p_next, inst=self.pi_probe,
            hop=self.pi_hop, ahead=self.pi_ahead, ready=self.pi_ready, t0=self.pi_t0,
            lat=self.lat, lat_t=self.lat_t, n_lat=self.n_lat)
        series = S.SeriesState(
            every=self.ts_every, n=self.ts_n, t=self.ts_t, q=self.ts_q,
            paused=self.ts_paused, rate=self.ts_rate, lrate=self.lrate)
        most = max(1, int(np.diff(self.nic_ptr).max()))  # QPs on the busiest NIC port
        scratch = S.Scratch(
            serve_frac=self.serve_frac, serve_bytes=self.serve_bytes, nic_tot=self.nic_tot,
            nic_nq=self.nic_nq,
            pmark=self.pmark, qseen=self.qseen, burst=self.burst, slot_out=self.slot_out,
            slot_hist=self.slot_hist, offer=np.zeros(most), wf=np.zeros(most))
        return links, switches, nics, flows, groups, probes, series, scratch

    def _build_flows(self, line: float) -> None:
        fab, topo, wl, rs = self.fabric, self.fabric.topo, self.workload, self._rs
        wire = topo.wire_bytes / topo.payload_bytes
        cols = _Columns()
        pred2: dict[int, int] = {}  # flows that wait for a second predecessor (trees)
        quantum: dict[int, float] = {}  # flows that forward whole chunks only (trees)
        self.g_f0: list[int] = []
        self.g_f1: list[int] = []
        for gi, col in enumerate(wl.collectives):
            ranks = np.array([fab.nic_index(r) for r in col.ranks], dtype=np.int64)
            n = len(ranks)
            f0 = cols.n
            if col.op == "alltoall":  # i -> j for every i != j, qps_per_connection each
                per = col.size_bytes / n / col.qps_per_connection * wire
                a, b = np.nonzero(~np.eye(n, dtype=bool))
                qps = col.qps_per_connection
                cols.add(src=np.repeat(ranks[a], qps), dst=np.repeat(ranks[b], qps), pred=-1,
                         chunk=math.inf, size=per, cls=0, group=gi, cap=line, kind=0,
                         dscp=ROCE_DSCP)
            elif col.algo == "tree":
                src, dst, pred, chunk, size = self._tree_flows(
                    col, ranks.tolist(), wire, cols.n, pred2, quantum)
                cols.add(src=src, dst=dst, pred=pred, chunk=chunk, size=size, cls=0,
                         group=gi, cap=line, kind=0, dscp=ROCE_DSCP)
            else:
                factor = 2.0 * (n - 1) / n if col.op == "all_reduce" else (n - 1) / n
                k = col.channels * col.qps_per_connection
                per = col.size_bytes * factor / k * wire
                ch = col.size_bytes / n / k * wire
                i = np.arange(n)
                for _c in range(k):  # a ring per channel and QP: i -> i + 1, after i - 1
                    cols.add(src=ranks, dst=ranks[(i + 1) % n], pred=cols.n + (i - 1) % n,
                             chunk=ch, size=per, cls=0, group=gi, cap=line, kind=0,
                             dscp=ROCE_DSCP)
            self.g_f0.append(f0)
            self.g_f1.append(cols.n)
        for bg in wl.background:
            nics = [fab.nic_index(x) for x in (bg.nics or fab.nic_names)]
            if bg.pattern == "incast":
                if len(nics) < bg.fan_in + 1:
                    raise ValueError(f"Background incast: fan_in={bg.fan_in} needs at least "
                                     f"{bg.fan_in + 1} NICs, got {len(nics)}")
                pairs = [(s, nics[0]) for s in nics[1:1 + bg.fan_in]]
            else:
                if len(nics) < 2:
                    raise ValueError("Background permutation needs at least 2 NICs")
                perm = _derangement(len(nics), rs)
                pairs = [(nics[i], nics[perm[i]]) for i in range(len(nics))]
            pa = np.array(pairs, dtype=np.int64).reshape(-1, 2)
            cols.add(src=pa[:, 0], dst=pa[:, 1], pred=-1, chunk=math.inf, size=math.inf,
                     cls=0 if bg.priority == "roce" else 1, group=-1, cap=bg.load * line,
                     kind=1, dscp=bg.marked_dscp)
        # every data flow's receiver acknowledges on the reverse path, in the same class:
        # ACKs share the switch queues (and PFC) with data; at the NIC they are tiny offers
        # that the max-min arbiter serves in full, ahead of the data QPs
        n_data = cols.n
        ack_of = np.full(n_data, -1, dtype=np.int64)
        if topo.ack_bytes > 0 and n_data:
            ack_of = np.concatenate([np.arange(n_data, 2 * n_data), ack_of])
            cols.add(src=cols.join("dst"), dst=cols.join("src"), pred=S.ACK_FLOW,
                     chunk=math.inf, size=math.inf, cls=cols.join("cls"),
                     group=cols.join("group"), cap=line, kind=2, dscp=cols.join("dscp"))
        self.f_ack = ack_of
        n_f = cols.n
        self.f_src = cols.join("src")
        self.f_dst = cols.join("dst")
        self.f_cls = cols.join("cls")
        self.f_pred = cols.join("pred")
        self.f_pred2 = np.full(n_f, -1, dtype=np.int64)
        for f, p2 in pred2.items():
            self.f_pred2[f] = p2
        self.f_quantum = np.zeros(n_f)
        for f, q in quantum.items():
            self.f_quantum[f] = q
        self.f_group = cols.join("group")
        self.f_cap = cols.join("cap")
        self.f_size = cols.join("size")
        self.f_chunk = cols.join("chunk")
        self.f_kind = cols.join("kind")  # 0 collective, 1 background, 2 ACKs of another flow
        self.f_dscp = cols.join("dscp")  # what the sender marks; the queue follows ``cls``
        # each QP gets its own UDP source port (RoCEv2 range 0xC000-0xFFFF), seeded; drawn
        # even when fixed, so that the rest of the seeded stream stays the same
        self.f_sport = rs.integers(0xC000, 0x10000, size=n_f)
        if fab.ecmp.udp_sport == "fixed":
            self.f_sport[:] = FIXED_UDP_SPORT
        width = fab.topo.path_width
        if n_f:
            self.f_path, self.f_hops = fab.routes(self.f_src, self.f_dst, self.f_sport,
                                                  ack=self.f_kind == 2)
        else:
            self.f_path = np.zeros((0, width), dtype=np.int64)
            self.f_hops = np.zeros(0, dtype=np.int64)
        hop_d = np.where(self.f_path >= 0, self.l_delay[np.maximum(self.f_path, 0)], 0)
        self.f_rd = hop_d.copy()  # delay from hop h to the receiver, column by column
        for h in range(hop_d.shape[1] - 2, -1, -1):
            self.f_rd[:, h] += self.f_rd[:, h + 1]
        self.f_rev = np.maximum(1, hop_d.sum(axis=1)).astype(np.int64)
        self._build_cnp_paths()
        # (ingress link, egress link) pair id of every switch hop, for burst accounting
        self.f_pair = np.zeros((n_f, width), dtype=np.int64)
        if n_f:
            self.f_pair[:, 1:] = _pair_ids(self.f_path, len(self.fabric.links))
        self.pair_stamp = np.full(int(self.f_pair.max(initial=0)) + 1, -1, dtype=np.int64)
        # CE marks wait out downstream queueing (up to ``extra`` steps) before reaching the NP;
        # the ring is bounded so that it stays small on fabrics with very many flows
        extra = int(min(512, max(16, 2**22 // max(n_f, 1))))
        ring2 = int(self.f_rd.max(initial=1)) + 2 + extra
        ring3 = int(self.f_rev.max(initial=1)) + 2 + (extra if self.f_chops.any() else 0)
        self.ff = np.zeros((n_f, S.NFF), order="F")
        self.fi = np.zeros((n_f, S.NFI), dtype=np.int32, order="F")
        line_f = self.npar[self.f_src, S.P_MAX_RATE] if n_f else np.zeros(0)
        self.ff[:, S.RC] = line_f
        self.ff[:, S.RT] = line_f
        self.ff[:, S.REMAIN] = np.where(self.f_kind == 2, 0.0, self.f_size)
        self.ff[:, S.TNPCNP] = -1e18
        # per switch hop only (hop 0 is the sending NIC, served by ``injection``)
        self.back = np.zeros((n_f, width - 1))
        self.pacc = np.zeros((n_f, width - 1))
        self.transit = np.zeros((int(self.l_delay.max()) + 1, n_f, width))
        self.ce_ring = np.zeros((ring2, n_f), dtype=np.int32)
        self.cnp_ring = np.zeros((ring3, n_f), dtype=np.int32)
        self.ce_count = np.zeros(ring2, dtype=np.int64)
        self.cnp_count = np.zeros(ring3, dtype=np.int64)
        self.n_active = np.zeros(1, dtype=np.int64)  # no limiter before the first CNP
        # flows grouped by their first link (the sending NIC port), CSR style
        first = self.f_path[:, 0] if n_f else np.zeros(0, dtype=np.int64)
        self.nic_idx = np.argsort(first, kind="stable").astype(np.int64)
        self.nic_ptr = np.searchsorted(first[self.nic_idx], np.arange(len(self.fabric.links) + 1)
                                       ).astype(np.int64)
        self.live = np.arange(n_f, dtype=np.int32)
        self.n_live = np.array([n_f], dtype=np.int64)
        # per-flow integer state in 32 bits: the step is memory-bound on large fabrics
        for name in ("f_src", "f_dst", "f_cls", "f_pred", "f_pred2", "f_ack", "f_group",
                     "f_path", "f_hops", "f_rd", "f_rev", "f_pair",
                     "nic_idx"):
            setattr(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.int32))
        n_g = len(wl.collectives)
        self.g_iters = np.array([c.iterations for c in wl.collectives], dtype=np.int64)
        self.g_iter = np.zeros(n_g, dtype=np.int64)
        self.g_start = np.zeros(n_g)
        self.g_times = np.zeros((n_g, int(self.g_iters.max(initial=1))))
        self.g_f0a = np.array(self.g_f0, dtype=np.int64)
        self.g_f1a = np.array(self.g_f1, dtype=np.int64)
        self.g_cur = self.g_f0a.copy()

    @staticmethod
    def _tree_flows(col: Collective, ranks: list[int], wire: float, base: int,
                    pred2: dict[int, int], quantum: dict[int, float]) -> tuple[list, ...]:
        """NCCL Tree AllReduce: per channel and QP, each of the two trees of
        ``double_binary_tree`` carries S/2; every edge has an up flow (child -> parent, waits
        for the child's own children) and a down flow (parent -> child, waits for what the
        parent got from its parent, or at the root for its children's up flows). A rank
        forwards whole chunks only (``tree_chunk_bytes``). Returns the columns src, dst,
        pred, chunk, size of flows numbered from ``base``."""
        src: list[int] = []
        dst: list[int] = []
        pred: list[int] = []
        chunk: list[float] = []
        size: list[float] = []
        k = col.channels * col.qps_per_connection
        n = len(ranks)
        per = col.size_bytes / 2.0 / k * wire
        depth = max(_depth(t, r) for t in double_binary_tree(n) for r in range(n))
        q = min(per, tree_chunk_bytes(col.size_bytes / k, depth) * wire)

        def add(a: int, b: int, waits: list[int]) -> int:
            f = base + len(src)
            src.append(ranks[a])
            dst.append(ranks[b])
            pred.append(waits[0] if waits else -1)
            if len(waits) > 1:
                pred2[f] = waits[1]
            if waits:
                quantum[f] = q
            chunk.append(0.0)
            size.append(per)
            return f

        for _c in range(k):
            for tree in double_binary_tree(n):
                up: dict[int, int] = {}
                order = sorted(range(n), key=lambda r: _depth(tree, r), reverse=True)
                for r in order:  # leaves first, so that children's up flows exist
                    parent, c0, c1 = tree[r]
                    if parent >= 0:
                        up[r] = add(r, parent, [up[c] for c in (c0, c1) if c >= 0])
                down: dict[int, int] = {}
                for r in reversed(order):  # root side first
                    parent = tree[r][0]
                    if parent < 0:
                        continue
                    grand, c0, c1 = tree[parent]
                    waits = [down[parent]] if grand >= 0 else \
                        [up[c] for c in (c0, c1) if c >= 0]
                    down[r] = add(parent, r, waits)
        return src, dst, pred, chunk, size

    def _build_probes(self) -> None:
        fab, topo, pr, rs = self.fabric, self.fabric.topo, self.workload.probes, self._rs
        if pr is None:
            self.p_path = np.zeros((0, topo.path_width), dtype=np.int64)
            self.p_hops = np.zeros(0, dtype=np.int64)
            self.p_back = np.zeros(0, dtype=np.int64)
            self.p_wire = 0.0
            self.p_interval = 1.0
            self.p_next = np.zeros(0)
            n_inst, n_lat = 1, 1
        else:
            nics = [fab.nic_index(x) for x in (pr.nics or fab.nic_names)]
            if len(nics) < 2:
                raise ValueError("Probes need at least 2 NICs")
            s = np.empty(pr.pairs, dtype=np.int64)
            d = np.empty(pr.pairs, dtype=np.int64)
            for k in range(pr.pairs):
                a, b = rs.choice(len(nics), size=2, replace=False)
                s[k], d[k] = nics[a], nics[b]
            sport = rs.integers(0xC000, 0x10000, size=pr.pairs)
            self.p_path, self.p_hops = fab.routes(s, d, sport)
            self.p_back = self.p_hops.copy()  # no return leg
            if pr.until == "ack":  # the ACK's links follow the probe's on the same row
                rpath, rhops = fab.routes(d, s, sport, ack=np.ones(pr.pairs, dtype=bool))
                both = np.full((pr.pairs, 2 * topo.path_width), -1, dtype=np.int64)
                for k in range(pr.pairs):
                    hf, hr = int(self.p_hops[k]), int(rhops[k])
                    both[k, :hf] = self.p_path[k, :hf]
                    both[k, hf:hf + hr] = rpath[k, :hr]
                self.p_path, self.p_hops = both, self.p_hops + rhops
            self.p_wire = float(pr.size_bytes + topo.header_bytes)
            self.p_interval = float(pr.interval_us)
            self.p_next = pr.interval_us * (np.arange(pr.pairs) + rs.random(pr.pairs)) \
                / pr.pairs
            n_inst = pr.pairs * 64
            n_lat = int(pr.pairs * (self.max_steps * self.dt / pr.interval_us + 2))
        self.pi_probe = np.full(n_inst, -1, dtype=np.int64)
        self.pi_hop = np.zeros(n_inst, dtype=np.int64)
        self.pi_ahead = np.zeros(n_inst)
        self.pi_ready = np.zeros(n_inst)
        self.pi_t0 = np.zeros(n_inst)
        self.lat = np.zeros(max(1, n_lat))
        self.lat_t = np.zeros(max(1, n_lat))
        self.n_lat = np.zeros(1, dtype=np.int64)

    # ---------------------------------------------------------------- stepping
    @property
    def done(self) -> bool:
        if self.t >= self.max_steps:
            return True
        return bool(len(self.g_iters) and np.all(self.g_iter >= self.g_iters))

    def advance(self, us: float) -> None:
        """Advance by ``us`` of simulated time (or less, if the run finishes)."""
        n = max(1, int(round(us / self.dt)))
        if self.done:
            return
        t0 = time.perf_counter()
        # the table holds only the structures' addresses (``state`` keeps the arrays alive for
        # the call): written again for other structures, or for a copy of this simulation
        # (deepcopy keeps the identity, not the addresses)
        state = self.state
        if self._table_of is not state or self._table[0][0, 0] != state[0].cap.ctypes.data:
            self._table_of = state
            self._table = (K.state_table(state), K.state_ref(state))
        self.t = int(K.run(n, self.t, self.dt, self.max_steps, self.rng, *self._table))
        self.wall_s += time.perf_counter() - t0

    def inject_cnp(self, flow: int, count: int = 1) -> None:
        """Deliver ``count`` CNPs to ``flow``'s reaction point in the next step (for unit tests
        of the DCQCN reaction point and for what-if studies)."""
        if not 0 <= flow < self.f_src.shape[0]:
            raise IndexError(f"flow {flow} out of range (0..{self.f_src.shape[0] - 1})")
        slot = self.t % self.cnp_ring.shape[0]
        self.cnp_ring[slot, flow] += int(count)
        self.cnp_count[slot] += int(count)

    def run(self) -> SimResult:
        while not self.done:
            self.advance(10_000.0)
        return self.result()

    # ---------------------------------------------------------------- reporting
    def counters(self) -> dict[str, dict[str, int]]:
        """Cumulative counters per port, named as the devices name them."""
        fab = self.fabric
        lc = self.l_counters
        out: dict[str, dict[str, int]] = {}
        rev = {(ln.src, ln.dst): i for i, ln in enumerate(fab.links)}
        n_cls = 2 if self._class1_used() else 1
        for li, ln in enumerate(fab.links):
            back = rev[(ln.dst, ln.src)]  # the link arriving at this port
            port = ln.src_port
            d: dict[str, int] = {}
            is_nic = self.l_src_nic[li] >= 0
            for c, tc in enumerate(self.cls_tc[:n_cls]):
                tx_c, rx_c = lc[li, c], lc[back, c]
                if is_nic:
                    d[f"rx_prio{tc}_pause"] = int(tx_c[S.C_PFC_FRAMES])
                    d[f"rx_prio{tc}_pause_duration"] = int(tx_c[S.C_PAUSED_US])
                    d[f"rx_prio{tc}_pause_transition"] = int(tx_c[S.C_TRANS])
                    d[f"tx_prio{tc}_pause"] = int(rx_c[S.C_PFC_FRAMES])
                    d[f"tx_prio{tc}_pause_duration"] = int(rx_c[S.C_XOFF_US])
                    d[f"tx_prio{tc}_pause_transition"] = int(rx_c[S.C_TRANS])
                    d[f"rx_prio{tc}_discards"] = int(rx_c[S.C_DROPS])
                    d[f"rx_prio{tc}_bytes"] = int(rx_c[S.C_TX])
                    d[f"tx_prio{tc}_bytes"] = int(tx_c[S.C_TX])
                else:
                    d[f"pfc{tc}_rx_pkts"] = int(tx_c[S.C_PFC_FRAMES])
                    d[f"pfc{tc}_tx_pkts"] = int(rx_c[S.C_PFC_FRAMES])
                    d[f"pfc{tc}_rx_pause_us"] = int(tx_c[S.C_PAUSED_US])
                    d[f"pfc{tc}_tx_pause_us"] = int(rx_c[S.C_XOFF_US])
                    d[f"pfc{tc}_tx_transitions"] = int(rx_c[S.C_TRANS])
                    d[f"queue{tc}_ecn_marked_pkts"] = int(tx_c[S.C_MARKS])
                    d[f"queue{tc}_drop_pkts"] = int(rx_c[S.C_DROPS])
                    d[f"queue{tc}_watermark_bytes"] = int(tx_c[S.C_WM])
                    d[f"queue{tc}_tx_bytes"] = int(tx_c[S.C_TX])
                    d[f"pfcwd{tc}_storm_detected"] = int(tx_c[S.C_STORM] >= 0.0)
            if is_nic:
                i = int(self.l_src_nic[li])
                d["np_ecn_marked_roce_packets"] = int(self.nic_ctr[i, 0])
                d["np_cnp_sent"] = int(self.nic_ctr[i, 1])
                d["rp_cnp_handled"] = int(self.nic_ctr[i, 2])
            out[port] = d
        return out

    def _build_cnp_paths(self) -> None:
        """``f_cpath``/``f_chops``: the path of a data flow's CNPs where the receiver sends them
        in the flow's own priority (``cnp_802p_prio``), so they queue behind its class in the
        switches; they take the path of the flow's ACKs (routed as ACKs where those are not
        modelled). Elsewhere ``f_chops`` is 0 and the CNP is delayed by the cables only."""
        fab = self.fabric
        n_f = len(self.f_src)
        prio = np.array([fab.dcqcn(n).cnp_802p_prio for n in fab.nic_names], dtype=np.int64)
        tc = np.array(self.cls_tc, dtype=np.int64)
        shared = (self.f_kind != 2) & (prio[self.f_dst] == tc[self.f_cls]) if n_f else \
            np.zeros(0, dtype=bool)
        width = fab.topo.path_width
        self.f_cpath = np.zeros((1, width), dtype=np.int64)  # never read while no CNP shares
        self.f_chops = np.zeros(n_f, dtype=np.int64)
        if not shared.any():
            return
        self.f_cpath = np.zeros((n_f, width), dtype=np.int64)
        idx = np.nonzero(shared)[0]
        if (self.f_ack[idx] >= 0).all():
            path, hops = self.f_path[self.f_ack[idx]], self.f_hops[self.f_ack[idx]]
        else:
            path, hops = fab.routes(self.f_dst[idx], self.f_src[idx], self.f_sport[idx],
                                    ack=np.ones(len(idx), dtype=bool))
        self.f_cpath[idx] = np.maximum(path, 0)
        self.f_chops[idx] = hops

    def _class1_used(self) -> bool:
        return bool(np.any(self.f_cls == 1))

    def flow_stats(self) -> dict[str, np.ndarray]:
        """Per-flow arrays: src/dst NIC index, kind (0 collective, 1 background, 2 ACKs),
        cumulative delivered payload bytes, current DCQCN rate (Gb/s), alpha and rate cuts,
        the links of its path, its UDP source port, the DSCP it is marked with and the traffic
        class (switch queue) it travels in."""
        eff = self.fabric.topo.efficiency
        return {
            "src": self.f_src.copy(), "dst": self.f_dst.copy(), "kind": self.f_kind.copy(),
            "delivered_bytes": self.ff[:, S.TOTDEL] * eff,
            "rate_gbps": self.ff[:, S.RC] * 8.0 / 1e3,
            "alpha": self.ff[:, S.ALPHA].copy(),
            "limited": self.fi[:, S.ACTIVE].copy(),
            "rate_decreases": self.fi[:, S.NCUTS].copy(),
            "path": self.f_path.copy(),
            "udp_sport": self.f_sport.copy(), "dscp": self.f_dscp.copy(),
            "tc": np.asarray(self.cls_tc, dtype=np.int64)[self.f_cls],
        }

    def result(self) -> SimResult:
        fab = self.fabric
        cols: list[CollectiveStats] = []
        for gi, col in enumerate(self.workload.collectives):
            times = [float(x) for x in self.g_times[gi, : int(self.g_iter[gi])]]
            n = len(col.ranks)
            if times:
                mean_t = float(np.mean(times))
                alg = col.size_bytes / (mean_t * 1e-6) / 1e9
            else:
                alg = 0.0
            cols.append(CollectiveStats(col.label, col.op, col.size_bytes, n, times, alg,
                                        alg * busbw_factor(col.op, n),
                                        len(times) == col.iterations))
        lat = self.lat[: int(self.n_lat[0])].copy()
        if lat.size:
            p50, p99, p999 = (float(x) for x in np.percentile(lat, [50, 99, 99.9]))
        else:
            p50 = p99 = p999 = math.nan
        uplinks: dict[str, int] = {}
        for up in np.asarray(self.fabric.leaf_up).ravel() if fab.spine_names else []:
            ln = fab.links[int(up)]
            uplinks[ln.src_port] = int(self.l_counters[int(up), :, S.C_TX].sum())
        storms = []
        for li, ln in enumerate(fab.links):
            for c, tc in enumerate(self.cls_tc):
                st = self.l_counters[li, c, S.C_STORM]
                if st >= 0.0:
                    storms.append((ln.src_port, tc, float(st)))
        n_ts = int(self.ts_n[0])
        ts: dict[str, np.ndarray] = {}
        port = ""
        if n_ts:
            qs = self.ts_q[:n_ts]
            busiest = int(np.argmax(qs.astype(np.float64).sum(axis=0)))
            port = fab.links[busiest].src_port
            ts = {"t_us": self.ts_t[:n_ts].copy(),
                  "queue_bytes": qs[:, busiest].astype(np.float64),
                  "paused": self.ts_paused[:n_ts, busiest].astype(np.int64),
                  "rate_gbps": self.ts_rate[:n_ts, busiest].astype(np.float64) * 8.0 / 1e3}
        return SimResult(
            collectives=cols, latency_us=lat, p50_us=p50, p99_us=p99, p999_us=p999,
            counters=self.counters(), uplink_bytes=uplinks, storms=storms,
            sim_time_us=self.t * self.dt, wall_s=self.wall_s, steps=self.t, dt_us=self.dt,
            seed=self.seed, timeseries=ts, timeseries_port=port, flows=self.flow_stats(),
            latency_t_us=self.lat_t[: int(self.n_lat[0])].copy())


def _pair_ids(path: np.ndarray, n_links: int) -> np.ndarray:
    """[flow, hop - 1] dense id of each (ingress link, egress link) pair a flow crosses at a
    switch (hops past the last: id 0), numbered in order of the pair: the ids of
    ``np.unique(..., return_inverse=True)``, from a presence table when it is small (a sort
    of every flow's hops took 0.1-0.3 s of a 512-NIC setup, a cumulative sum over the table
    0.04 s)."""
    code = np.where(path[:, 1:] >= 0, path[:, :-1] * (n_links + 1) + path[:, 1:], -1) + 1
    size = (n_links + 1) ** 2 + 1
    if size > 1 << 25:
        return np.unique(code, return_inverse=True)[1].reshape(code.shape)
    seen = np.zeros(size, dtype=bool)
    seen[code.ravel()] = True
    present = np.flatnonzero(seen)
    ids = np.zeros(size, dtype=np.int64)  # calloc: only the pages of present codes are touched
    ids[present] = np.arange(present.size)
    return ids[code]


class _Columns:
    """Per-flow columns assembled part by part (numpy arrays, scalars broadcast) and joined
    once: a 512-NIC AlltoAll has 261,632 flows, too many for Python lists."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}
        self.n = 0

    def add(self, **columns: object) -> None:
        n = len(columns["src"])  # type: ignore[arg-type]
        for name, v in columns.items():
            a = np.asarray(v)
            self.parts.setdefault(name, []).append(np.broadcast_to(a, (n,)) if a.ndim == 0
                                                   else a)
        self.n += n

    def join(self, name: str) -> np.ndarray:
        parts = self.parts.get(name, [])
        if not parts:
            return np.zeros(0, dtype=np.float64 if name in ("chunk", "size", "cap")
                            else np.int64)
        out = np.concatenate(parts)
        return out.astype(np.float64 if out.dtype.kind == "f" else np.int64)


def _depth(tree: list[tuple[int, int, int]], r: int) -> int:
    d = 0
    while tree[r][0] >= 0:
        r = tree[r][0]
        d += 1
    return d


def _derangement(n: int, rs: np.random.Generator) -> np.ndarray:
    """A random permutation without fixed points (nobody sends to itself)."""
    while True:
        p = rs.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


def simulate(fabric: Fabric, workload: Workload, seed: int = 0, dt_us: float | None = None,
             max_time_us: float | None = None) -> SimResult:
    """Run a workload to completion (or ``max_time_us``) and return its results."""
    return Simulation(fabric, workload, seed=seed, dt_us=dt_us, max_time_us=max_time_us).run()
