"""The compiled inner loop: one call advances the fabric by many fixed time steps.

State lives in numpy arrays (built in ``rocesim.engine.Simulation._build``); this module only
holds numba kernels, so that the Python side stays readable. Units inside the kernel: time in
µs, data in wire bytes, rates in bytes/µs. numba is used because per-step Python overhead
dominates small scenarios (see bench/rocesim_bench.py, which reports it); ``cache=True`` keeps
the JIT cost to the first run on a machine.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Flow float state columns.
RC, RT, ALPHA, REMAIN, SENT, DELIV, BYTECNT, TTIMER, TALPHA, TCUT, TNPCNP, INFL, TOTDEL, \
    OFFER = range(14)
NFF = 14
# Flow int state columns.
TSTAGE, BSTAGE, ACTIVE, CUTPEND, INCSINCE, CNPPERIOD = range(6)
NFI = 6
# NIC parameter columns (kernel units).
(P_TIME_RESET, P_BYTE_RESET, P_THRESHOLD, P_MAX_RATE, P_AI, P_HAI, P_GD_FAC, P_MIN_DEC,
 P_MIN_RATE, P_FIRST_RATE, P_G, P_ALPHA_RTT, P_RRMP, P_INIT_ALPHA, P_CLAMP, P_CLAMP_TI,
 P_MIN_CNP_GAP, P_LINE) = range(18)
NP_COLS = 18
# Link counter columns (per class), float64.
(C_TX, C_MARKS, C_DROPS, C_PFC_FRAMES, C_XOFF_US, C_PAUSED_US, C_TRANS, C_WM, C_STORM,
 C_DROP_BYTES) = range(10)
NLC = 10

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@njit(cache=True, inline="always")
def _uniform(rng: np.ndarray) -> float:
    """splitmix64: a per-simulation generator, so interleaved simulations stay deterministic."""
    rng[0] = rng[0] + _GOLD
    z = rng[0]
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> _S31)
    return float(z >> _S11) * _INV53


@njit(cache=True)
def _binomial(rng: np.ndarray, n: int, p: float) -> int:
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    k = 0
    for _ in range(n):
        if _uniform(rng) < p:
            k += 1
    return k


@njit(cache=True)
def _mark_prob(q: float, kmin: float, kmax: float, pmax: float, on: int) -> float:
    if on == 0 or q <= kmin:
        return 0.0
    if q > kmax:
        return 1.0
    return pmax * (q - kmin) / (kmax - kmin)


BURST_MAX = 32


@njit(cache=True)
def _burst_params(rho: float, n: int) -> tuple:
    """Packet-level backlog a departing packet sees on top of the fluid queue.

    A fluid model has no queue below 100 % load, but real ports see microbursts whenever
    packets from different ingress ports collide; that is what makes a Kmin of a packet or two
    mark heavily. Model: with ``n`` ingress ports feeding the queue (ports whose live flows
    are routed through it; bytes from one port arrive serialised and cannot burst) and the
    step's offered load ``rho``, a packet finds
    k >= 1 packets ahead with probability a = (1 - 1/n) * rho, k following a geometric law of
    ratio rho truncated at n - 1 (n simultaneous arrivals leave at most n - 1 waiting).
    Returns (a, r, kmax).
    """
    if n <= 1 or rho <= 0.0:
        return 0.0, 0.0, 0
    if rho > 0.98:
        rho = 0.98
    kmax = n - 1 if n - 1 < BURST_MAX else BURST_MAX
    return (1.0 - 1.0 / n) * rho, rho, kmax


@njit(cache=True)
def _burst_mean(a: float, r: float, kmax: int) -> float:
    """E[B] in packets: a x mean of the geometric law truncated at kmax (closed form)."""
    if kmax <= 0 or a <= 0.0:
        return 0.0
    rk = r ** kmax
    return a * (1.0 - (kmax + 1) * rk + kmax * rk * r) / ((1.0 - r) * (1.0 - rk))


@njit(cache=True)
def _mark_prob_burst(qf: float, ecn: np.ndarray, a: float, r: float, kmax: int,
                     pkt: float) -> float:
    """Expected RED marking probability over the burst backlog distribution."""
    on = int(ecn[3])
    if on == 0:
        return 0.0
    p = (1.0 - a) * _mark_prob(qf, ecn[0], ecn[1], ecn[2], on)
    if kmax <= 0 or qf + kmax * pkt <= ecn[0]:
        return p  # even the largest burst stays below Kmin
    w = a * (1.0 - r) / (1.0 - r ** kmax)  # P(B = 1); P(B = k + 1) = P(B = k) x r
    for k in range(1, kmax + 1):
        p += w * _mark_prob(qf + k * pkt, ecn[0], ecn[1], ecn[2], on)
        w *= r
    return p


@njit(cache=True)
def _burst_sample(rng: np.ndarray, a: float, r: float, kmax: int) -> int:
    u = _uniform(rng)
    if u >= a:
        return 0
    w = a * (1.0 - r) / (1.0 - r ** kmax)
    for k in range(1, kmax + 1):
        u -= w
        if u < 0.0:
            return k
        w *= r
    return kmax


@njit(cache=True)
def count_ingress(live: np.ndarray, n_live: int, f_hops: np.ndarray, f_path: np.ndarray,
                  f_pair: np.ndarray, f_cls: np.ndarray, pair_stamp: np.ndarray,
                  nfl: np.ndarray, stamp: int) -> None:
    """nfl[link, class] = distinct ingress ports whose live flows feed that egress queue (the
    ``n`` of the burst model); recounted whenever the live flow set changes."""
    nfl[:, :] = 0
    for jf in range(n_live):
        f = live[jf]
        for h in range(1, f_hops[f]):
            pid = f_pair[f, h]
            if pair_stamp[pid] != stamp:
                pair_stamp[pid] = stamp
                nfl[f_path[f, h], f_cls[f]] += 1


@njit(cache=True)
def _wrr(cap: float, d0: float, d1: float, w0: float, p0: int, p1: int) -> tuple:
    """Work-conserving weighted round robin between two data classes on one link.

    ``d0``/``d1`` are the bytes each class could send this step; a paused class gets nothing.
    Returns the bytes served per class.
    """
    if p0 != 0:
        d0 = 0.0
    if p1 != 0:
        d1 = 0.0
    if d0 + d1 <= cap:
        return d0, d1
    s0 = cap * w0
    s1 = cap - s0
    if d0 < s0:
        return d0, min(d1, cap - d0)
    if d1 < s1:
        return min(d0, cap - d1), d1
    return s0, s1


@njit(cache=True)
def _waterfill(ff: np.ndarray, idx: np.ndarray, i0: int, i1: int, f_cls: np.ndarray, c: int,
               cap: float) -> None:
    """Max-min share of ``cap`` among the offers (``OFFER`` column) of flows idx[i0:i1] in
    class ``c``: find the level L with sum(min(offer, L)) = cap, then cap each offer at L."""
    n = 0
    for i in range(i0, i1):
        f = idx[i]
        if f_cls[f] == c and ff[f, OFFER] > 0.0:
            n += 1
    if n == 0:
        return
    level = cap / n
    for _ in range(16):
        sat = 0.0
        unsat = 0
        for i in range(i0, i1):
            f = idx[i]
            if f_cls[f] != c:
                continue
            x = ff[f, OFFER]
            if x <= 0.0:
                continue
            if x <= level:
                sat += x
            else:
                unsat += 1
        if unsat == 0:
            break
        new = (cap - sat) / unsat
        if new <= level * (1.0 + 1e-9):
            break
        level = new
    for i in range(i0, i1):
        f = idx[i]
        if f_cls[f] == c and ff[f, OFFER] > level:
            ff[f, OFFER] = level


@njit(cache=True)
def _increase(ff: np.ndarray, fi: np.ndarray, f: int, par: np.ndarray, n: int) -> None:
    """One DCQCN increase event (timer or byte counter), ConnectX stage semantics.

    The event's counter has already been incremented. With F = ``rpg_threshold``: fast recovery
    (RC <- (RT + RC) / 2) while both stage counters are <= F, i.e. the first F events after a
    cut as in the DCQCN paper; additive increase (RT += ``rpg_ai_rate``) once one counter is
    past F; hyper increase (RT += ``rpg_hai_rate``) once both are. With the byte counter
    disabled (``rpg_byte_reset`` = 0) the timer stage stands in for both. ``rpg_max_rate``
    caps RT and RC.
    """
    thr = par[n, P_THRESHOLD]
    ts = fi[f, TSTAGE]
    bs = fi[f, BSTAGE] if par[n, P_BYTE_RESET] > 0 else ts
    rt = ff[f, RT]
    if ts > thr and bs > thr:
        rt += par[n, P_HAI]
    elif ts > thr or bs > thr:
        rt += par[n, P_AI]
    cap = par[n, P_MAX_RATE]
    if rt > cap:
        rt = cap
    ff[f, RT] = rt
    rc = 0.5 * (ff[f, RC] + rt)
    if rc > cap:
        rc = cap
    ff[f, RC] = rc
    fi[f, INCSINCE] = 1  # any increase since the last cut (issue #2 semantics)


@njit(cache=True)
def run(
    n_steps, t0, dt, max_steps, rng,
    # links
    l_cap, l_delay, l_dst_sw, l_src_nic, l_hroom, l_refresh, l_ecn, l_counters,
    q, ing, xoff, xoff_thr, xoff_hist, next_refresh, paused_since,
    # switches / classes
    sw_buffer, reserve, resume, alpha_xoff, static_xoff, alpha_lossy, cls_lossless, w_roce,
    wd_detect,
    # NICs
    npar, nic_ctr,
    # flows
    f_path, f_hops, f_cls, f_src, f_dst, f_pred, f_group, f_rd, f_rev, f_cap, f_size, f_chunk,
    ff, fi, back, pacc, transit, ce_ring, cnp_ring, wire_pkt,
    # collectives
    g_iters, g_iter, g_start, g_times, g_f0, g_f1, g_cur,
    # probes
    p_path, p_hops, p_wire, p_interval, p_next, pi_probe, pi_hop, pi_ahead, pi_ready, pi_t0,
    lat, lat_t, n_lat,
    # time series
    ts_every, ts_n, ts_t, ts_q, ts_paused, ts_rate,
    # scratch
    serve_frac, serve_bytes, nic_tot, sh_used, pmark, qprev, qseen, nfl, burst,
    f_pair, pair_stamp, live, n_live, slot_out, slot_hist, lrate, nic_idx, nic_ptr,
):
    """Advance ``n_steps`` steps from step ``t0``; returns the step reached.

    Stops early when every collective finished its iterations (if there are collectives) or at
    ``max_steps``.
    """
    n_links = l_cap.shape[0]
    n_sw = sw_buffer.shape[0]
    n_groups = g_iters.shape[0]
    n_probe = p_hops.shape[0]
    n_inst = pi_probe.shape[0]
    ring = transit.shape[0]
    ring2 = ce_ring.shape[0]
    ring3 = cnp_ring.shape[0]
    inv_pkt = 1.0 / wire_pkt
    t = t0
    t_end = min(t0 + n_steps, max_steps)
    while t < t_end:
        if n_groups > 0:
            alldone = True
            for g in range(n_groups):
                if g_iter[g] < g_iters[g]:
                    alldone = False
                    break
            if alldone:
                break
        now = t * dt
        slot = t % ring
        slot2 = t % ring2
        slot3 = t % ring3

        # ---- 1. arrivals: bytes that left a link d steps ago reach its far end ----
        for jf in range(n_live[0]):
            f = live[jf]
            if ff[f, INFL] <= 0.0:
                continue
            c = f_cls[f]
            hops = f_hops[f]
            for h in range(hops):
                x = transit[slot, f, h]
                if x <= 0.0:
                    continue
                transit[slot, f, h] = 0.0
                ln = f_path[f, h]
                if h + 1 < hops:
                    s = l_dst_sw[ln]
                    occ = ing[ln, c] - reserve
                    drop = 0.0
                    if cls_lossless[c] != 0:
                        if xoff[ln, c] != 0 and occ + x > xoff_thr[ln, c] + l_hroom[ln]:
                            drop = occ + x - (xoff_thr[ln, c] + l_hroom[ln])
                            if drop > x:
                                drop = x
                    else:
                        free = sw_buffer[s] - sh_used[s]
                        lim = alpha_lossy * free
                        if occ + x > lim:
                            drop = min(x, occ + x - lim)
                    if drop > 0.0:
                        x -= drop
                        ff[f, INFL] -= drop
                        ff[f, REMAIN] += drop  # resent by the sender (retransmission model)
                        ff[f, SENT] -= drop
                        l_counters[ln, c, C_DROP_BYTES] += drop
                        l_counters[ln, c, C_DROPS] += drop / wire_pkt
                    if x > 0.0:
                        back[f, h + 1] += x
                        nxt = f_path[f, h + 1]
                        q[nxt, c] += x
                        ing[ln, c] += x
                else:
                    ff[f, DELIV] += x
                    ff[f, TOTDEL] += x
                    ff[f, INFL] -= x

        # ---- 2. notification point: marked packets reach the receiver ----
        for jf in range(n_live[0]):
            f = live[jf]
            m = ce_ring[slot2, f]
            if m == 0:
                continue
            ce_ring[slot2, f] = 0
            nd = f_dst[f]
            nic_ctr[nd, 0] += m  # np_ecn_marked_roce_packets
            gap = npar[nd, P_MIN_CNP_GAP]
            k = 0
            if gap <= 0.0:
                k = m
            elif now - ff[f, TNPCNP] >= gap:
                k = 1
                ff[f, TNPCNP] = now
            if k > 0:
                nic_ctr[nd, 1] += k  # np_cnp_sent
                cnp_ring[(t + f_rev[f]) % ring3, f] += k

        # ---- 3. reaction point: CNPs, alpha, cuts, increases ----
        for jf in range(n_live[0]):
            f = live[jf]
            n = f_src[f]
            k = cnp_ring[slot3, f]
            if k > 0:
                cnp_ring[slot3, f] = 0
                nic_ctr[n, 2] += k  # rp_cnp_handled
                if fi[f, ACTIVE] == 0:
                    # first CNP: the NIC allocates a rate limiter for this QP
                    fi[f, ACTIVE] = 1
                    ff[f, ALPHA] = npar[n, P_INIT_ALPHA]
                    ff[f, TALPHA] = 0.0
                    ff[f, TTIMER] = 0.0
                    ff[f, BYTECNT] = 0.0
                    fi[f, TSTAGE] = 0
                    fi[f, BSTAGE] = 0
                    fi[f, CNPPERIOD] = 0
                    if npar[n, P_FIRST_RATE] > 0.0:
                        ff[f, RT] = ff[f, RC]
                        ff[f, RC] = min(ff[f, RC], npar[n, P_FIRST_RATE])
                        ff[f, TCUT] = now
                        fi[f, INCSINCE] = 0
                    else:
                        ff[f, TCUT] = -1e18
                        fi[f, INCSINCE] = 1  # the target starts from the pre-cut rate
                        fi[f, CUTPEND] = 1
                else:
                    fi[f, CNPPERIOD] = 1
                    fi[f, CUTPEND] = 1
            if fi[f, ACTIVE] == 0:
                continue
            # alpha update every dce_tcp_rtt
            ff[f, TALPHA] += dt
            if ff[f, TALPHA] >= npar[n, P_ALPHA_RTT] - 1e-9:
                ff[f, TALPHA] -= npar[n, P_ALPHA_RTT]
                g = npar[n, P_G]
                a = (1.0 - g) * ff[f, ALPHA]
                if fi[f, CNPPERIOD] != 0:
                    a += g
                ff[f, ALPHA] = a
                fi[f, CNPPERIOD] = 0
            # rate cut at most once per rate_reduce_monitor_period
            if fi[f, CUTPEND] != 0 and now - ff[f, TCUT] >= npar[n, P_RRMP] - 1e-9:
                rc = ff[f, RC]
                if npar[n, P_CLAMP] != 0.0 or (fi[f, INCSINCE] != 0
                                               and npar[n, P_CLAMP_TI] != 0.0):
                    ff[f, RT] = rc
                new = rc * (1.0 - ff[f, ALPHA] * npar[n, P_GD_FAC])
                floor = rc * npar[n, P_MIN_DEC]
                if new < floor:
                    new = floor
                if new < npar[n, P_MIN_RATE]:
                    new = npar[n, P_MIN_RATE]
                ff[f, RC] = new
                ff[f, TCUT] = now
                ff[f, TTIMER] = 0.0
                ff[f, BYTECNT] = 0.0
                fi[f, TSTAGE] = 0
                fi[f, BSTAGE] = 0
                fi[f, INCSINCE] = 0
                fi[f, CUTPEND] = 0
            else:
                ff[f, TTIMER] += dt
                if ff[f, TTIMER] >= npar[n, P_TIME_RESET] - 1e-9:
                    ff[f, TTIMER] -= npar[n, P_TIME_RESET]
                    fi[f, TSTAGE] += 1
                    _increase(ff, fi, f, npar, n)
                br = npar[n, P_BYTE_RESET]
                if br > 0.0:
                    guard = 0
                    while ff[f, BYTECNT] >= br and guard < 64:
                        ff[f, BYTECNT] -= br
                        fi[f, BSTAGE] += 1
                        _increase(ff, fi, f, npar, n)
                        guard += 1

        # ---- 4. PFC: per (ingress port, priority) accounting at every switch ----
        for s in range(n_sw):
            sh_used[s] = 0.0
        for ln in range(n_links):
            s = l_dst_sw[ln]
            if s < 0:
                continue
            for c in range(2):
                occ = ing[ln, c] - reserve
                if occ > 0.0:
                    sh_used[s] += occ
        for ln in range(n_links):
            s = l_dst_sw[ln]
            for c in range(2):
                if s < 0 or cls_lossless[c] == 0:
                    xoff_hist[slot, ln, c] = 0
                    continue
                occ = ing[ln, c] - reserve
                free = sw_buffer[s] - sh_used[s]
                if free < 0.0:
                    free = 0.0
                thr = alpha_xoff * free
                if static_xoff > 0.0 and static_xoff < thr:
                    thr = static_xoff
                if xoff[ln, c] == 0:
                    if occ > thr:
                        xoff[ln, c] = 1
                        xoff_thr[ln, c] = thr
                        l_counters[ln, c, C_PFC_FRAMES] += 1.0
                        next_refresh[ln, c] = now + l_refresh[ln]
                else:
                    if occ < thr - resume:
                        xoff[ln, c] = 0
                        l_counters[ln, c, C_PFC_FRAMES] += 1.0  # the XON (zero-quanta) frame
                        l_counters[ln, c, C_TRANS] += 1.0
                    else:
                        while now >= next_refresh[ln, c]:
                            l_counters[ln, c, C_PFC_FRAMES] += 1.0
                            next_refresh[ln, c] += l_refresh[ln]
                if xoff[ln, c] != 0:
                    l_counters[ln, c, C_XOFF_US] += dt
                xoff_hist[slot, ln, c] = xoff[ln, c]

        # ---- 5. egress service of every link (switch queues and NIC ports) ----
        for ln in range(n_links):
            hs = (slot - l_delay[ln]) % ring
            slot_hist[ln] = hs
            slot_out[ln] = (t + l_delay[ln]) % ring
            p0 = xoff_hist[hs, ln, 0]
            p1 = xoff_hist[hs, ln, 1]
            for c in range(2):
                pc = p0 if c == 0 else p1
                if pc != 0:
                    if paused_since[ln, c] < 0.0:
                        paused_since[ln, c] = now
                    l_counters[ln, c, C_PAUSED_US] += dt
                    if (now + dt - paused_since[ln, c] >= wd_detect
                            and l_counters[ln, c, C_STORM] < 0.0):
                        l_counters[ln, c, C_STORM] = paused_since[ln, c]
                else:
                    paused_since[ln, c] = -1.0
            cap = l_cap[ln] * dt
            if l_src_nic[ln] >= 0:
                serve_bytes[ln, 0] = cap
                serve_bytes[ln, 1] = cap
                nic_tot[ln, 0] = 0.0
                nic_tot[ln, 1] = 0.0
                serve_frac[ln, 0] = p0
                serve_frac[ln, 1] = p1
                continue
            s0, s1 = _wrr(cap, q[ln, 0], q[ln, 1], w_roce, p0, p1)
            serve_bytes[ln, 0] = s0
            serve_bytes[ln, 1] = s1
            serve_frac[ln, 0] = s0 / q[ln, 0] if q[ln, 0] > 0.0 else 0.0
            serve_frac[ln, 1] = s1 / q[ln, 1] if q[ln, 1] > 0.0 else 0.0
            # every flow in a class queue is served the same fraction, so the queue drains by
            # exactly the served bytes (step 6 moves the per-flow shares)
            l_counters[ln, 0, C_TX] += s0
            l_counters[ln, 1, C_TX] += s1
            for c in range(2):
                # The queue a packet sees within the step: the mean of the backlog left by the
                # previous step and the backlog this step leaves (arrivals spread over the
                # step), so a line-rate flow through an idle port sees ~0, not a step's bytes.
                q_end = q[ln, c] - (s0 if c == 0 else s1)
                if q_end < 0.0:
                    q_end = 0.0
                qm = 0.5 * (qprev[ln, c] + q_end)
                qseen[ln, c] = qm
                # packet-level bursts on top of the fluid queue (see _burst_params)
                # arrivals this step = queue now - backlog the previous step left
                arrived = q[ln, c] - qprev[ln, c]
                a, r, kmax = _burst_params(arrived / cap, nfl[ln, c])
                burst[ln, c, 0] = a
                burst[ln, c, 1] = r
                burst[ln, c, 2] = kmax
                pmark[ln, c] = _mark_prob_burst(qm, l_ecn[ln, c], a, r, kmax, wire_pkt)
                bm = _burst_mean(a, r, kmax) * wire_pkt if kmax > 0 else 0.0
                burst[ln, c, 3] = bm
                wm = (q_end if q_end > qprev[ln, c] else qprev[ln, c]) + bm
                q[ln, c] = q_end
                if wm > l_counters[ln, c, C_WM]:
                    l_counters[ln, c, C_WM] = wm
                qprev[ln, c] = q_end

        # ---- 6. switch queues: dequeue, per-packet ECN marking at dequeue ----
        for jf in range(n_live[0]):
            f = live[jf]
            if ff[f, INFL] <= 0.0:
                continue
            c = f_cls[f]
            hops = f_hops[f]
            for h in range(1, hops):
                x = back[f, h]
                if x <= 0.0:
                    continue
                ln = f_path[f, h]
                fr = serve_frac[ln, c]
                if fr <= 0.0:
                    continue
                out = x * fr if fr < 1.0 else x
                back[f, h] = x - out
                ing[f_path[f, h - 1], c] -= out
                transit[slot_out[ln], f, h] += out
                pm = pmark[ln, c]
                if pm <= 0.0:
                    continue  # no marking: skip the per-packet accounting
                acc = pacc[f, h] + out
                if acc >= wire_pkt:
                    npk = int(acc * inv_pkt)
                    pacc[f, h] = acc - npk * wire_pkt
                    m = _binomial(rng, npk, pm)
                    if m > 0:
                        l_counters[ln, c, C_MARKS] += m
                        # the marked packet still crosses the downstream queues (their
                        # current delay, capped by the ring) and cables before the NP sees it
                        qd = 0.0
                        for h2 in range(h + 1, hops):
                            l2 = f_path[f, h2]
                            qd += qseen[l2, c] / l_cap[l2]
                        dly = f_rd[f, h] + int(qd / dt)
                        if dly > ring2 - 1:
                            dly = ring2 - 1
                        ce_ring[(t + dly) % ring2, f] += m
                else:
                    pacc[f, h] = acc

        # ---- 7. NIC injection: DCQCN rate, credit of the ring, port share, pause ----
        for jf in range(n_live[0]):
            f = live[jf]
            ff[f, OFFER] = 0.0
            rem = ff[f, REMAIN]
            if rem <= 0.0:
                continue
            ln = f_path[f, 0]
            c = f_cls[f]
            if serve_frac[ln, c] != 0.0:  # NIC egress paused for this priority
                continue
            r = ff[f, RC]
            if f_cap[f] < r:
                r = f_cap[f]
            x = r * dt
            if rem < x:
                x = rem
            pr = f_pred[f]
            if pr >= 0:
                credit = ff[pr, DELIV] + f_chunk[f] - ff[f, SENT]
                if credit < x:
                    x = credit
            if x <= 0.0:
                continue
            ff[f, OFFER] = x
            nic_tot[ln, c] += x
        for ln in range(n_links):
            if l_src_nic[ln] < 0:
                continue
            d0 = nic_tot[ln, 0]
            d1 = nic_tot[ln, 1]
            s0, s1 = _wrr(l_cap[ln] * dt, d0, d1, w_roce, 0, 0)
            serve_bytes[ln, 0] = 1.0
            serve_bytes[ln, 1] = 1.0
            # an oversubscribed port: the NIC's QP arbiter shares it max-min fairly
            if s0 < d0 * (1.0 - 1e-12):
                _waterfill(ff, nic_idx, nic_ptr[ln], nic_ptr[ln + 1], f_cls, 0, s0)
            if s1 < d1 * (1.0 - 1e-12):
                _waterfill(ff, nic_idx, nic_ptr[ln], nic_ptr[ln + 1], f_cls, 1, s1)
        for jf in range(n_live[0]):
            f = live[jf]
            x = ff[f, OFFER]
            if x <= 0.0:
                continue
            ln = f_path[f, 0]
            c = f_cls[f]
            ff[f, REMAIN] -= x
            ff[f, SENT] += x
            ff[f, INFL] += x
            ff[f, BYTECNT] += x
            transit[slot_out[ln], f, 0] += x
            l_counters[ln, c, C_TX] += x

        # ---- 8. latency probes, timed through the queues they meet ----
        for p in range(n_probe):
            if p_next[p] < now + dt:
                for i in range(n_inst):
                    if pi_probe[i] < 0:
                        pi_probe[i] = p
                        pi_hop[i] = 0
                        pi_ahead[i] = -1.0
                        pi_ready[i] = p_next[p]
                        pi_t0[i] = p_next[p]
                        break
                p_next[p] += p_interval
        for i in range(n_inst):
            p = pi_probe[i]
            if p < 0:
                continue
            while pi_probe[i] >= 0 and pi_ready[i] < now + dt:
                h = pi_hop[i]
                ln = p_path[p, h]
                tready = pi_ready[i] if pi_ready[i] > now else now
                if h == 0:
                    if xoff_hist[slot_hist[ln], ln, 0] != 0:
                        pi_ready[i] = now + dt
                        break
                    depart = tready
                else:
                    if pi_ahead[i] < 0.0:
                        pi_ahead[i] = qseen[ln, 0] + 1e-9
                        kb = int(burst[ln, 0, 2])
                        if kb > 0:
                            pi_ahead[i] += wire_pkt * _burst_sample(
                                rng, burst[ln, 0, 0], burst[ln, 0, 1], kb)
                    # bytes ahead drain at the class's service this step; burst packets
                    # (not in the fluid queue) drain at least at the class's WRR share
                    if xoff_hist[slot_hist[ln], ln, 0] != 0:
                        sb = 0.0
                    else:
                        sb = serve_bytes[ln, 0]
                        floor = w_roce * l_cap[ln] * dt
                        if sb < floor:
                            sb = floor
                    if sb <= 0.0 and pi_ahead[i] > 1e-6:
                        pi_ready[i] = now + dt
                        break
                    if pi_ahead[i] > sb:
                        pi_ahead[i] -= sb
                        pi_ready[i] = now + dt
                        break
                    depart = tready + (dt * pi_ahead[i] / sb if sb > 0.0 else 0.0)
                arrive = depart + p_wire / l_cap[ln] + l_delay[ln] * dt
                if h + 1 >= p_hops[p]:
                    if n_lat[0] < lat.shape[0]:
                        lat[n_lat[0]] = arrive - pi_t0[i]
                        lat_t[n_lat[0]] = pi_t0[i]
                        n_lat[0] += 1
                    pi_probe[i] = -1
                else:
                    pi_hop[i] = h + 1
                    pi_ahead[i] = -1.0
                    pi_ready[i] = arrive

        t += 1
        now = t * dt

        # ---- 9. collective iterations ----
        for g in range(n_groups):
            if g_iter[g] >= g_iters[g]:
                continue
            done = True
            f = g_cur[g]  # flows before the cursor finished this iteration already
            while f < g_f1[g]:
                if ff[f, DELIV] < f_size[f] * (1.0 - 1e-9) - 1e-6:
                    done = False
                    break
                f += 1
            g_cur[g] = f
            if done:
                g_cur[g] = g_f0[g]
                g_times[g, g_iter[g]] = now - g_start[g]
                g_iter[g] += 1
                g_start[g] = now
                if g_iter[g] < g_iters[g]:
                    for f in range(g_f0[g], g_f1[g]):
                        ff[f, REMAIN] = f_size[f]
                        ff[f, SENT] = 0.0
                        ff[f, DELIV] = 0.0
                        ff[f, INFL] = 0.0
                else:
                    for f in range(g_f0[g], g_f1[g]):
                        ff[f, REMAIN] = 0.0
                        ff[f, INFL] = 0.0
                        ff[f, OFFER] = 0.0
                    # the group is over: drop its flows from the live list (exact: they never
                    # send again, so their DCQCN state no longer matters)
                    k = 0
                    for jf in range(n_live[0]):
                        f = live[jf]
                        gf = f_group[f]
                        if gf >= 0 and g_iter[gf] >= g_iters[gf]:
                            continue
                        live[k] = f
                        k += 1
                    n_live[0] = k
                    count_ingress(live, k, f_hops, f_path, f_pair, f_cls, pair_stamp, nfl,
                                  -2 - t)

        # ---- 10. time series (adaptive decimation keeps <= cap points) ----
        if t % ts_every[0] == 0:
            if ts_n[0] >= ts_t.shape[0]:
                half = ts_n[0] // 2
                for k in range(half):
                    ts_t[k] = ts_t[2 * k + 1]
                    for ln in range(n_links):
                        ts_q[k, ln] = ts_q[2 * k + 1, ln]
                        ts_paused[k, ln] = ts_paused[2 * k + 1, ln]
                        ts_rate[k, ln] = ts_rate[2 * k + 1, ln]
                ts_n[0] = half
                ts_every[0] *= 2
            k = ts_n[0]
            ts_t[k] = now
            for ln in range(n_links):
                ts_q[k, ln] = qprev[ln, 0] + qprev[ln, 1] + burst[ln, 0, 3] + burst[ln, 1, 3]
                ts_paused[k, ln] = xoff_hist[slot_hist[ln], ln, 0]
                lrate[ln, 0] = 0.0
                lrate[ln, 1] = 0.0
            # mean DCQCN rate of the sending flows routed through each link
            for jf in range(n_live[0]):
                f = live[jf]
                if ff[f, REMAIN] > 0.0:
                    r = ff[f, RC]
                    if f_cap[f] < r:
                        r = f_cap[f]
                    for h in range(f_hops[f]):
                        ln = f_path[f, h]
                        lrate[ln, 0] += r
                        lrate[ln, 1] += 1.0
            for ln in range(n_links):
                ts_rate[k, ln] = lrate[ln, 0] / lrate[ln, 1] if lrate[ln, 1] > 0.0 else 0.0
            ts_n[0] = k + 1
    return t
