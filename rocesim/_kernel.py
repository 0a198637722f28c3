"""The compiled inner loop: one call advances the fabric by many fixed time steps.

State lives in the named structures of ``rocesim._state`` (built in
``rocesim.engine.Simulation._build``); this module holds the numba kernels (and the table that
hands them the state), so that the Python side stays readable. One step is a fixed sequence of
phase functions (``run``), each a plain function of the structures it reads and writes, so that
each can be driven alone in a test.
Units inside the kernel: time in µs, data in wire bytes, rates in bytes/µs. numba is used
because per-step Python overhead dominates small scenarios (see bench/rocesim_bench.py, which
reports it); ``cache=True`` keeps the JIT cost to the first run on a machine, and
``error_model="numpy"`` drops the divide-by-zero test before every division (the kernel
never divides by zero; S2 ~10 % faster).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.core.datamodel import models, register_default
from numba.core.errors import TypingError
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from rocesim import _state
from rocesim._state import (
    ACK_FLOW,
    ACTIVE,
    ALPHA,
    BSTAGE,
    BYTECNT,
    C_DROP_BYTES,
    C_DROPS,
    C_MARKS,
    C_PAUSED_US,
    C_PFC_FRAMES,
    C_STORM,
    C_TRANS,
    C_TX,
    C_WM,
    C_XOFF_US,
    CNPPERIOD,
    CUTPEND,
    DELIV,
    INCSINCE,
    INFL,
    N_CNP_HANDLED,
    N_CNP_SENT,
    N_ECN_MARKED,
    NCUTS,
    P_AI,
    P_ALPHA_RTT,
    P_BYTE_RESET,
    P_CLAMP,
    P_CLAMP_TI,
    P_CNP_PER_PORT,
    P_FIRST_RATE,
    P_G,
    P_GD_FAC,
    P_HAI,
    P_INIT_ALPHA,
    P_MAX_RATE,
    P_MIN_CNP_GAP,
    P_MIN_DEC,
    P_MIN_RATE,
    P_RELEASE,
    P_RRMP,
    P_THRESHOLD,
    P_TIME_RESET,
    RC,
    REMAIN,
    RT,
    SENT,
    TALPHA,
    TCUT,
    TNPCNP,
    TOTDEL,
    TSTAGE,
    TTIMER,
    FlowState,
    GroupState,
    LinkState,
    NicState,
    ProbeState,
    Scratch,
    SeriesState,
    SwitchState,
)

# numba keys its cache of this module's functions on this file alone, yet compiles the column
# constants imported above from ``_state`` into their code: edited there alone, they would
# leave a warm cache running the kernel with the old columns. So an edit of them stops the
# import until their fingerprint is copied here, which changes this file and re-keys the cache.
STATE_FINGERPRINT = "1e5e0ce2844567a0"


def state_fingerprint() -> str:
    """A digest of ``_state``'s integer constants (names and values)."""
    consts = sorted((k, v) for k, v in vars(_state).items() if k.isupper() and isinstance(v, int))
    return hashlib.sha256(repr(consts).encode()).hexdigest()[:16]


def check_state_fingerprint() -> None:
    got = state_fingerprint()
    if got != STATE_FINGERPRINT:
        raise ImportError(
            f"rocesim/_state.py's column constants changed (fingerprint {got}, the kernel was "
            f"written for {STATE_FINGERPRINT}): check rocesim/_kernel.py against them and set "
            f'STATE_FINGERPRINT = "{got}" there, which also re-keys numba\'s cache of the kernel')


check_state_fingerprint()

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0
# Typed constants for helper arguments: a literal ``0`` or ``1`` would be typed Literal[int] and
# compile the helper once more beside its int64 / int8 signature (#24 item 4: one signature).
_ONE = np.int64(1)
_CLS0, _CLS1 = np.int64(0), np.int64(1)
_NO = np.int8(0)

# Every helper is its own compiled function, without numba IR inlining (``inline="always"``
# copied and re-typed each callee's IR at every call site: ~30 % of the cold compile under
# cProfile), and marked ``alwaysinline`` for LLVM (``forceinline``), which inlines it into
# ``run`` after linking at no extra compile time. Left to LLVM's own cost model the phases
# stayed calls, each passing every field of the state structures it takes: a small step took
# 2.8x as long (S1 17 -> 6 ms, inc4_100g_kA_mlx 18.0 -> 5.1 ms; results bit-identical,
# bench/rocesim_digest.py). Nothing here allocates, so no reference counting. Only what the
# engine calls from Python (``_pyjit``, ``run``, ``burst_table``) gets a Python entry point:
# building one per helper was 45 % of the first compile (17.5 -> 9.6 s).
_jit = njit(cache=True, error_model="numpy", _nrt=False,  # type: ignore[call-overload]
            no_cpython_wrapper=True, no_cfunc_wrapper=True, forceinline=True)
_pyjit = njit(cache=True, error_model="numpy", _nrt=False,  # type: ignore[call-overload]
              no_cfunc_wrapper=True)


@_jit
def _uniform(rng: np.ndarray) -> float:
    """splitmix64: a per-simulation generator, so interleaved simulations stay deterministic."""
    rng[0] = rng[0] + _GOLD
    z = rng[0]
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> _S31)
    return float(z >> _S11) * _INV53


@_jit
def _binomial(rng: np.ndarray, n: int, p: float) -> int:
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0 - 1e-12:  # sure marks draw nothing (keeps the random stream of p = 1)
        return n
    k = 0
    for _ in range(n):
        if _uniform(rng) < p:
            k += 1
    return k


@_jit
def _mark_prob(q: float, kmin: float, kmax: float, pmax: float, on: int) -> float:
    if on == 0 or q <= kmin:
        return 0.0
    if q > kmax:
        return 1.0
    return pmax * (q - kmin) / (kmax - kmin)


BURST_MAX = 32  # deepest packet-level backlog modelled, packets
BURST_GRID = 128  # load steps of the backlog table (``burst_table``), interpolated linearly
BURST_N_CAP = 64  # ingress ports beyond this use the table's last row (near the M/D/1 limit)


@njit(cache=True, error_model="numpy",  # type: ignore[call-overload]
      no_cfunc_wrapper=True)  # allocates: keeps reference counting
def burst_table(n_max: int, seen_by: int) -> np.ndarray:
    """tab[n, i, k] for a queue fed by ``n`` ingress ports at load i / BURST_GRID, k =
    1..BURST_MAX, and at k = 0 the mean (the sum of the tail up to n - 1 packets). ``seen_by``
    1: P(B >= k), the packets a departing packet of one of the streams leaves waiting (what
    marking sees); 0: P(V > k), the work found at a random instant, by a packet from outside
    the streams (a probe) or a queue sample.

    DCQCN senders are paced at their rate and bytes from one ingress port arrive serialised,
    so the queue is a superposition of n periodic streams, the N*D/D/1 queue. A packet that
    starts service leaves B >= k behind exactly when the k-th packet after it waited more than
    k service times, so P(B >= k) is the waiting-time tail P(W > k) of a packet, which sees
    the work of the n - 1 other streams. The work of N streams (period D = n / rho service
    times) at a random instant has the tail (the N*D/D/1 formula, V. B. Iversen, "Teletraffic
    Engineering and Network Planning", DTU/ITU-D, ch. 13)
    P(V > t) = sum_{j > t}^{N} C(N, j) x^j (1 - x)^(N - j) (D - N + t)/(D - j + t), x = (j - t)/D,
    with N = n - ``seen_by``. Both agree with a direct simulation of superposed periodic
    streams to within 10 % (tests/rocesim/test_fidelity.py).
    """
    tab = np.zeros((n_max + 1, BURST_GRID + 1, BURST_MAX + 1))
    lf = np.zeros(n_max + 1)  # log j!
    for j in range(1, n_max + 1):
        lf[j] = lf[j - 1] + np.log(j)
    for n in range(2, n_max + 1):
        big_n = n - seen_by
        for i in range(1, BURST_GRID + 1):
            d = n * BURST_GRID / i
            for k in range(1, min(big_n, BURST_MAX + 1)):  # P(W > t) = 0 for t >= N
                s = 0.0
                for j in range(k + 1, big_n + 1):
                    x = (j - k) / d
                    s += np.exp(lf[big_n] - lf[j] - lf[big_n - j] + j * np.log(x)
                                + (big_n - j) * np.log1p(-x)) * (d - big_n + k) / (d - j + k)
                tab[n, i, k] = s
            tab[n, i, 0] = tab[n, i, 1:min(n, BURST_MAX + 1)].sum()
    return tab


@_jit
def _burst_params(rho: float, n: int) -> tuple:
    """Packet-level backlog a departing packet sees on top of the fluid queue.

    A fluid model has no queue below 100 % load, but real ports see microbursts whenever
    packets from different ingress ports collide; that is what makes a Kmin of a packet or two
    mark. The backlog of ``n`` paced ingress streams at the step's load ``rho`` follows
    ``burst_table``, at most n - 1 packets. Returns (n, rho, kmax)."""
    if n <= 1 or rho <= 0.0:
        return 0.0, 0.0, 0
    if rho > 1.0:
        rho = 1.0
    kmax = n - 1 if n - 1 < BURST_MAX else BURST_MAX
    return float(n), rho, kmax


@_jit
def _burst_row(tab: np.ndarray, n: float, rho: float) -> tuple:
    """(n's row, load step i, weight of step i + 1) in a burst table (or its mean)."""
    row = int(n) if int(n) < tab.shape[0] else tab.shape[0] - 1
    x = rho * BURST_GRID
    i = int(x)
    if i >= BURST_GRID:
        i = BURST_GRID - 1
    return row, i, x - i


@_jit
def _tail(tab: np.ndarray, row: int, i: int, w: float, k: int) -> float:
    """P(B >= k), interpolated between two load steps."""
    lo = tab[row, i, k]
    return lo + w * (tab[row, i + 1, k] - lo)


@_jit
def _burst_mean(mean: np.ndarray, n: float, rho: float, kmax: int) -> float:
    """E[B] in packets from ``mean`` = a burst table's k = 0 column (a compact copy: it is read
    for every queue every step)."""
    if kmax <= 0:
        return 0.0
    row, i, w = _burst_row(mean, n, rho)
    lo = mean[row, i]
    return lo + w * (mean[row, i + 1] - lo)


@_jit
def _mark_prob_burst(qf: float, ecn: np.ndarray, tab: np.ndarray, n: float, rho: float,
                     kmax: int, pkt: float) -> float:
    """Expected RED marking probability over the burst backlog distribution."""
    on = int(ecn[3])
    if on == 0:
        return 0.0
    if kmax <= 0:
        return _mark_prob(qf, ecn[0], ecn[1], ecn[2], on)
    if qf + kmax * pkt <= ecn[0]:
        return 0.0  # even the largest burst stays below Kmin
    row, i, w = _burst_row(tab, n, rho)
    t = _tail(tab, row, i, w, _ONE)
    p = (1.0 - t) * _mark_prob(qf, ecn[0], ecn[1], ecn[2], on)
    for k in range(1, kmax + 1):
        nxt = _tail(tab, row, i, w, k + 1) if k < kmax else 0.0  # P(B >= k + 1)
        p += (t - nxt) * _mark_prob(qf + k * pkt, ecn[0], ecn[1], ecn[2], on)
        if nxt < 1e-12:  # the rest of the tail, at the next depth's (lower) probability
            p += nxt * _mark_prob(qf + (k + 1) * pkt, ecn[0], ecn[1], ecn[2], on)
            break
        t = nxt
    return p


@_jit
def _burst_sample(rng: np.ndarray, tab: np.ndarray, n: float, rho: float, kmax: int) -> int:
    if kmax <= 0:
        return 0
    u = _uniform(rng)
    row, i, w = _burst_row(tab, n, rho)
    k = 0
    while k < kmax and u < _tail(tab, row, i, w, k + 1):
        k += 1
    return k


@_pyjit
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


@_jit
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


@_jit
def _waterfill(offers: np.ndarray, idx: np.ndarray, i0: int, i1: int, f_cls: np.ndarray,
               c: int, cap: float, buf: np.ndarray) -> None:
    """Max-min share of ``cap`` among the offers ``offers[k]`` of flows idx[i0 + k] in class
    ``c``: find the level L with sum(min(offer, L)) = cap, then cap each offer at L.
    The positive offers are copied once into ``buf`` (in flow order, so the sums are the
    same) for the iterations to scan."""
    n = 0
    for k in range(i1 - i0):
        if f_cls[idx[i0 + k]] == c and offers[k] > 0.0:
            buf[n] = offers[k]
            n += 1
    if n == 0:
        return
    level = cap / n
    for _ in range(16):
        sat = 0.0
        unsat = 0
        for k in range(n):
            x = buf[k]
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
    for k in range(i1 - i0):
        if f_cls[idx[i0 + k]] == c and offers[k] > level:
            offers[k] = level


@_jit
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





# ==================================================================== DCQCN reaction point
@_jit
def _restart_increase(ff: np.ndarray, fi: np.ndarray, f: int) -> None:
    """A cut (or the limiter's allocation) restarts the increase timer, byte counter and
    stages."""
    ff[f, TTIMER] = 0.0
    ff[f, BYTECNT] = 0.0
    fi[f, TSTAGE] = 0
    fi[f, BSTAGE] = 0


@_jit
def rp_cnp(ff: np.ndarray, fi: np.ndarray, f: int, par: np.ndarray, n: int, now: float) -> None:
    """CNPs reach flow ``f``'s reaction point. The first one allocates the NIC's rate limiter
    (``initial_alpha_value``; ``rate_to_set_on_first_cnp`` if set, else the rate stays) and
    starts its α and rate-decrease timers; every CNP marks the α period and requests a cut at
    the next tick of the decrease timer."""
    if fi[f, ACTIVE] == 0:
        fi[f, ACTIVE] = 1
        ff[f, ALPHA] = par[n, P_INIT_ALPHA]
        ff[f, TALPHA] = 0.0
        fi[f, CNPPERIOD] = 0
        _restart_increase(ff, fi, f)
        if par[n, P_FIRST_RATE] > 0.0:
            ff[f, RT] = ff[f, RC]
            ff[f, RC] = min(ff[f, RC], par[n, P_FIRST_RATE])
            ff[f, TCUT] = now
            fi[f, INCSINCE] = 0
        else:
            ff[f, TCUT] = now
            fi[f, INCSINCE] = 3  # the first cut's target is the pre-cut rate
            fi[f, CUTPEND] = 1
    else:
        fi[f, CNPPERIOD] = 1
        fi[f, CUTPEND] = 1


@_jit
def rp_alpha(ff: np.ndarray, fi: np.ndarray, f: int, par: np.ndarray, n: int,
             dt: float) -> None:
    """α update every ``dce_tcp_rtt``: α <- (1 - g) α + g if a CNP arrived in the period, else
    (1 - g) α, with g = ``P_G`` (see engine: from dce_tcp_g as the fabric reads it)."""
    ff[f, TALPHA] += dt
    if ff[f, TALPHA] >= par[n, P_ALPHA_RTT] - 1e-9:
        ff[f, TALPHA] -= par[n, P_ALPHA_RTT]
        g = par[n, P_G]
        a = (1.0 - g) * ff[f, ALPHA]
        if fi[f, CNPPERIOD] != 0:
            a += g
        ff[f, ALPHA] = a
        fi[f, CNPPERIOD] = 0


@_jit
def rp_rate(ff: np.ndarray, fi: np.ndarray, f: int, par: np.ndarray, n: int, now: float,
            dt: float) -> None:
    """The rate-decrease timer ticks every ``rate_reduce_monitor_period`` from the first CNP;
    a tick that finds a CNP received since the previous one cuts (mlxconfig RPG_GD: "the flow
    rate is reduced at the beginning of the next rate_reduce_monitor_period interval"):
    RC <- max(RC (1 - α gd), RC ``rpg_min_dec_fac``, ``rpg_min_rate``). RT <- RC first when
    ``clamp_tgt_rate``, or when the rate increased since the last cut: by the byte counter
    always, by the timer only with ``clamp_tgt_rate_after_time_inc`` (mlxconfig
    CLAMP_TGT_RATE_AFTER_TIME_INC: "the target rate should be updated if the transmission rate
    was increased due to the timer, and not only due to the byte counter"). Otherwise the
    timer and byte-counter increase events (``_increase``), after which a flow back at
    ``rpg_max_rate`` releases its limiter if ``P_RELEASE`` (``Topology.release_limiter``).
    """
    period = par[n, P_RRMP]
    tick = now - ff[f, TCUT] >= period - 1e-9
    if tick:
        ff[f, TCUT] = ff[f, TCUT] + period if period > 0.0 else now
    if fi[f, CUTPEND] != 0 and tick:
        rc = ff[f, RC]
        inc = fi[f, INCSINCE]  # bit 0: a timer increase, bit 1: a byte-counter increase
        if par[n, P_CLAMP] != 0.0 or inc & 2 or (inc & 1 and par[n, P_CLAMP_TI] != 0.0):
            ff[f, RT] = rc
        new = rc * (1.0 - ff[f, ALPHA] * par[n, P_GD_FAC])
        floor = rc * par[n, P_MIN_DEC]
        if new < floor:
            new = floor
        if new < par[n, P_MIN_RATE]:
            new = par[n, P_MIN_RATE]
        ff[f, RC] = new
        fi[f, NCUTS] += 1
        _restart_increase(ff, fi, f)
        fi[f, INCSINCE] = 0
        fi[f, CUTPEND] = 0
    else:
        ff[f, TTIMER] += dt
        increased = False
        if ff[f, TTIMER] >= par[n, P_TIME_RESET] - 1e-9:
            ff[f, TTIMER] -= par[n, P_TIME_RESET]
            fi[f, TSTAGE] += 1
            fi[f, INCSINCE] |= 1
            _increase(ff, fi, f, par, n)
            increased = True
        br = par[n, P_BYTE_RESET]
        if br > 0.0:
            guard = 0
            while ff[f, BYTECNT] >= br and guard < 64:
                ff[f, BYTECNT] -= br
                fi[f, BSTAGE] += 1
                fi[f, INCSINCE] |= 2
                _increase(ff, fi, f, par, n)
                guard += 1
                increased = True
        # ``Topology.release_limiter``: an increase that brings the flow back to full rate,
        # with no cut pending, de-allocates the limiter; the next CNP allocates a fresh one
        # (``rp_cnp``). Full rate: within 1 Mb/s (the NIC's rates are whole Mb/s; halving the
        # gap to RT reaches the float maximum only after ~50 increase events).
        top = par[n, P_MAX_RATE] - 0.125
        if (increased and par[n, P_RELEASE] != 0.0 and fi[f, CUTPEND] == 0
                and ff[f, RC] >= top and ff[f, RT] >= top):
            fi[f, ACTIVE] = 0


# ==================================================================== phases of one step
@_jit
def arrive(f: int, slot: int, lk: LinkState, sw: SwitchState, fl: FlowState) -> None:
    """``arrivals`` for flow ``f``."""
    ff, transit, path = fl.ff, fl.transit, fl.path
    if ff[f, INFL] <= 0.0:
        return
    c = fl.cls[f]
    hops = fl.hops[f]
    for h in range(hops):
        x = transit[slot, f, h]
        if x <= 0.0:
            continue
        transit[slot, f, h] = 0.0
        ln = path[f, h]
        if h + 1 < hops:
            occ = lk.ing[ln, c] - sw.reserve
            lim = lk.arr_lim[ln, c]
            drop = 0.0
            if occ + x > lim:
                drop = occ + x - lim
                if drop > x:
                    drop = x
            if drop > 0.0:
                x -= drop
                ff[f, INFL] -= drop
                ff[f, REMAIN] += drop  # resent by the sender (retransmission model)
                ff[f, SENT] -= drop
                lk.counters[ln, c, C_DROP_BYTES] += drop
                lk.counters[ln, c, C_DROPS] += drop / sw.wire_pkt
            if x > 0.0:
                fl.back[f, h] += x  # hop h + 1's queue (column 0 is hop 1)
                lk.q[path[f, h + 1], c] += x
                lk.ing[ln, c] += x
        else:
            ff[f, DELIV] += x
            ff[f, TOTDEL] += x
            ff[f, INFL] -= x
            # the receiver acknowledges what it got, on the way back (ACK flows exist only
            # with ack_bytes > 0: without them the per-flow ``ack`` is not even read)
            if sw.ack_ratio > 0.0 and fl.ack[f] >= 0:
                ff[fl.ack[f], REMAIN] += x * sw.ack_ratio


@_pyjit
def arrival_limits(lk: LinkState, sw: SwitchState) -> None:
    """``arr_lim``: the ingress occupancy (above the reserve) past which ``arrive`` drops, per
    (switch-bound link, class), for the next step. Lossless: XOFF threshold in force plus the
    headroom while XOFF is asserted, none otherwise; lossy: the dynamic threshold of the far
    switch's free shared buffer. Depends only on what ``pfc`` set, so it is made there once per
    step instead of per arriving flow."""
    for ln in range(lk.cap.shape[0]):
        s = lk.dst_sw[ln]
        for c in range(2):
            if s < 0:
                lk.arr_lim[ln, c] = np.inf
            elif sw.cls_lossless[c] != 0:
                if lk.xoff[ln, c] != 0:
                    lk.arr_lim[ln, c] = lk.xoff_thr[ln, c] + lk.hroom[ln]
                else:
                    lk.arr_lim[ln, c] = np.inf
            else:
                lk.arr_lim[ln, c] = sw.alpha_lossy * (sw.buffer[s] - sw.sh_used[s])


@_jit
def arrivals(slot: int, lk: LinkState, sw: SwitchState, fl: FlowState) -> None:
    """Bytes that left a link ``delay`` steps ago reach its far end: the next switch egress
    queue (per-(ingress, priority) accounting; headroom overflow drops the lossless class, the
    dynamic threshold the lossy one) or the receiver."""
    for jf in range(fl.n_live[0]):
        arrive(fl.live[jf], slot, lk, sw, fl)


@_jit
def notification_point(t: int, now: float, dt: float, nic: NicState, fl: FlowState,
                       lk: LinkState, x: Scratch) -> None:
    """Marked packets reach the receiver NIC, which sends CNPs: one per marked packet, or at
    most one per ``min_time_between_cnps`` from the port (``cnp_moderation`` 1) or from each
    flow (2); each reaches the sender ``rev`` steps later, plus the current delay of the
    reverse path's queues when CNPs share the data class (``cnp_802p_prio``)."""
    slot2 = t % fl.ce_ring.shape[0]
    if fl.ce_count[slot2] != 0:  # else no live flow has a mark in this slot
        for jf in range(fl.n_live[0]):
            notify(fl.live[jf], t, slot2, now, dt, nic, fl, lk, x)
    fl.ce_count[slot2] = 0


@_jit
def notify(f: int, t: int, slot2: int, now: float, dt: float, nic: NicState, fl: FlowState,
           lk: LinkState, x: Scratch) -> None:
    """``notification_point`` for flow ``f`` (``slot2``: this step's slot of ``ce_ring``)."""
    m = fl.ce_ring[slot2, f]
    if m == 0:
        return
    fl.ce_ring[slot2, f] = 0
    nd = fl.dst[f]
    nic.ctr[nd, N_ECN_MARKED] += m
    gap = nic.par[nd, P_MIN_CNP_GAP]
    k = 0
    if gap <= 0.0:
        k = m
    elif nic.par[nd, P_CNP_PER_PORT] != 0.0:
        if now - nic.tcnp[nd] >= gap:
            k = 1
            nic.tcnp[nd] = now
    elif now - fl.ff[f, TNPCNP] >= gap:
        k = 1
        fl.ff[f, TNPCNP] = now
    if k > 0:
        nic.ctr[nd, N_CNP_SENT] += k
        dly = fl.rev[f]
        if fl.chops[f] > 0:
            # in the data class the CNP waits behind the switch queues on its way back
            # (their current delay, capped by the ring); the NIC sends it ahead of its QPs
            ring3 = fl.cnp_ring.shape[0]
            c = fl.cls[f]
            qd = 0.0
            for h in range(1, fl.chops[f]):
                ln = fl.cpath[f, h]
                qd += x.qseen[ln, c] / lk.cap[ln]
            dly += int(qd / dt)
            if dly > ring3 - 1:
                dly = ring3 - 1
        s3 = (t + dly) % fl.cnp_ring.shape[0]
        fl.cnp_ring[s3, f] += k
        fl.cnp_count[s3] += k


@_jit
def reaction_point(t: int, now: float, dt: float, nic: NicState, fl: FlowState) -> None:
    """The sender NIC runs DCQCN per flow: CNPs, α, cuts, increases (``rp_*``)."""
    slot3 = t % fl.cnp_ring.shape[0]
    if fl.cnp_count[slot3] != 0 or fl.n_active[0] != 0:  # else no flow has anything to do
        for jf in range(fl.n_live[0]):
            react(fl.live[jf], slot3, now, dt, nic, fl)
    fl.cnp_count[slot3] = 0


@_jit
def react(f: int, slot3: int, now: float, dt: float, nic: NicState, fl: FlowState) -> None:
    """``reaction_point`` for flow ``f`` (``slot3``: this step's slot of ``cnp_ring``)."""
    ff, fi, par = fl.ff, fl.fi, nic.par
    k = fl.cnp_ring[slot3, f]
    if k > 0:
        n = fl.src[f]
        fl.cnp_ring[slot3, f] = 0
        nic.ctr[n, N_CNP_HANDLED] += k
        was = fi[f, ACTIVE]
        rp_cnp(ff, fi, f, par, n, now)
        fl.n_active[0] += fi[f, ACTIVE] - was
    if fi[f, ACTIVE] == 0:
        return
    n = fl.src[f]
    rp_alpha(ff, fi, f, par, n, dt)
    rp_rate(ff, fi, f, par, n, now, dt)
    if fi[f, ACTIVE] == 0:  # the limiter was released
        fl.n_active[0] -= 1


@_jit
def pfc(slot: int, now: float, dt: float, lk: LinkState, sw: SwitchState) -> None:
    """PFC per (switch ingress port, priority): XOFF above min(static, α x free shared buffer),
    XON ``resume`` below; pause frames at XOFF, per refresh period and at XON."""
    n_links = lk.cap.shape[0]
    sh_used, lc = sw.sh_used, lk.counters
    for s in range(sw.buffer.shape[0]):
        sh_used[s] = 0.0
    for ln in range(n_links):
        s = lk.dst_sw[ln]
        if s < 0:
            continue
        for c in range(sw.n_cls):
            occ = lk.ing[ln, c] - sw.reserve
            if occ > 0.0:
                sh_used[s] += occ
    for ln in range(n_links):
        s = lk.dst_sw[ln]
        for c in range(sw.n_cls):
            if s < 0 or sw.cls_lossless[c] == 0:
                lk.xoff_hist[slot, ln, c] = 0
                continue
            occ = lk.ing[ln, c] - sw.reserve
            free = sw.buffer[s] - sh_used[s]
            if free < 0.0:
                free = 0.0
            thr = sw.alpha_xoff * free
            if sw.static_xoff > 0.0 and sw.static_xoff < thr:
                thr = sw.static_xoff
            if lk.xoff[ln, c] == 0:
                if occ > thr:
                    lk.xoff[ln, c] = 1
                    lk.xoff_thr[ln, c] = thr
                    lc[ln, c, C_PFC_FRAMES] += 1.0
                    lk.next_refresh[ln, c] = now + lk.refresh[ln]
            else:
                if occ < thr - sw.resume:
                    lk.xoff[ln, c] = 0
                    lc[ln, c, C_PFC_FRAMES] += 1.0  # the XON (zero-quanta) frame
                    lc[ln, c, C_TRANS] += 1.0
                else:
                    while now >= lk.next_refresh[ln, c]:
                        lc[ln, c, C_PFC_FRAMES] += 1.0
                        lk.next_refresh[ln, c] += lk.refresh[ln]
            if lk.xoff[ln, c] != 0:
                lc[ln, c, C_XOFF_US] += dt
            lk.xoff_hist[slot, ln, c] = lk.xoff[ln, c]
    arrival_limits(lk, sw)


@_jit
def service(t: int, slot: int, now: float, dt: float, lk: LinkState, sw: SwitchState,
            x: Scratch) -> None:
    """Every link serves its queues: pauses seen one link delay after the far end sent them,
    work-conserving WRR between the data classes, the queue a packet sees, its microburst
    backlog and marking probability. NIC ports only record their pause state here
    (``injection`` serves them)."""
    ring = lk.xoff_hist.shape[0]
    lc = lk.counters
    wire_pkt = sw.wire_pkt
    for ln in range(lk.cap.shape[0]):
        # (slot - delay) % ring and (t + delay) % ring, without an integer division per link
        hs = slot - lk.delay[ln]
        if hs < 0:
            hs += ring
        x.slot_hist[ln] = hs
        so = slot + lk.delay[ln]
        if so >= ring:
            so -= ring
        x.slot_out[ln] = so
        p0 = lk.xoff_hist[hs, ln, 0]
        p1 = lk.xoff_hist[hs, ln, 1]
        for c in range(sw.n_cls):
            pc = p0 if c == 0 else p1
            if pc != 0:
                if lk.paused_since[ln, c] < 0.0:
                    lk.paused_since[ln, c] = now
                lc[ln, c, C_PAUSED_US] += dt
                if (now + dt - lk.paused_since[ln, c] >= sw.wd_detect
                        and lc[ln, c, C_STORM] < 0.0):
                    lc[ln, c, C_STORM] = lk.paused_since[ln, c]
            else:
                lk.paused_since[ln, c] = -1.0
        cap = lk.cap[ln] * dt
        if lk.src_nic[ln] >= 0:
            x.serve_bytes[ln, 0] = cap
            x.serve_bytes[ln, 1] = cap
            x.nic_tot[ln, 0] = 0.0
            x.nic_tot[ln, 1] = 0.0
            x.nic_nq[ln] = 0.0
            x.serve_frac[ln, 0] = p0
            x.serve_frac[ln, 1] = p1
            continue
        q = lk.q
        s0, s1 = _wrr(cap, q[ln, 0], q[ln, 1], sw.w_roce, p0, p1)
        x.serve_bytes[ln, 0] = s0
        x.serve_bytes[ln, 1] = s1
        x.serve_frac[ln, 0] = s0 / q[ln, 0] if q[ln, 0] > 0.0 else 0.0
        x.serve_frac[ln, 1] = s1 / q[ln, 1] if q[ln, 1] > 0.0 else 0.0
        # every flow in a class queue is served the same fraction, so the queue drains by
        # exactly the served bytes (``marking`` moves the per-flow shares)
        lc[ln, 0, C_TX] += s0
        lc[ln, 1, C_TX] += s1
        qprev = lk.qprev
        for c in range(sw.n_cls):
            # The queue a packet sees within the step: the mean of the backlog left by the
            # previous step and the backlog this step leaves (arrivals spread over the
            # step), so a line-rate flow through an idle port sees ~0, not a step's bytes.
            q_end = q[ln, c] - (s0 if c == 0 else s1)
            if q_end < 0.0:
                q_end = 0.0
            qm = 0.5 * (qprev[ln, c] + q_end)
            x.qseen[ln, c] = qm
            # packet-level bursts on top of the fluid queue (see _burst_params)
            # arrivals this step = queue now - backlog the previous step left
            arrived = q[ln, c] - qprev[ln, c]
            a, r, kmax = _burst_params(arrived / cap, lk.nfl[ln, c])
            x.burst[ln, c, 0] = a
            x.burst[ln, c, 1] = r
            x.burst[ln, c, 2] = kmax
            x.pmark[ln, c] = _mark_prob_burst(qm, lk.ecn[ln, c], sw.btail, a, r, kmax, wire_pkt)
            bm = _burst_mean(sw.bmean, a, r, kmax) * wire_pkt if kmax > 0 else 0.0
            x.burst[ln, c, 3] = bm
            wm = (q_end if q_end > qprev[ln, c] else qprev[ln, c]) + bm
            q[ln, c] = q_end
            if wm > lc[ln, c, C_WM]:
                lc[ln, c, C_WM] = wm
            qprev[ln, c] = q_end


# compiled on its own (one call per step): inlined into ``run``, the larger loop nest left the
# per-flow passes less register room (interleaved A/B: S3 +8 %, S2's AlltoAll phase +5 %)
@_jit
def marking(t: int, dt: float, rng: np.ndarray, lk: LinkState, sw: SwitchState, fl: FlowState,
            x: Scratch) -> None:
    """Switch queues dequeue each flow's share; dequeued packets are CE-marked with the
    queue's probability (one Bernoulli draw per whole packet) and the marks start towards the
    receiver, delayed by the cables and the downstream queues (capped by the ring)."""
    for jf in range(fl.n_live[0]):
        mark(fl.live[jf], t, dt, rng, lk, sw, fl, x)


@_jit
def mark(f: int, t: int, dt: float, rng: np.ndarray, lk: LinkState, sw: SwitchState,
         fl: FlowState, x: Scratch) -> None:
    """``marking`` for flow ``f``."""
    ff, path, back, pacc = fl.ff, fl.path, fl.back, fl.pacc
    if ff[f, INFL] <= 0.0:
        return
    wire_pkt = sw.wire_pkt
    c = fl.cls[f]
    hops = fl.hops[f]
    for h in range(1, hops):
        xb = back[f, h - 1]
        if xb <= 0.0:
            continue
        ln = path[f, h]
        fr = x.serve_frac[ln, c]
        if fr <= 0.0:
            continue
        out = xb * fr  # fr <= 1 (served <= queued); exactly xb when the queue drains
        back[f, h - 1] = xb - out
        lk.ing[path[f, h - 1], c] -= out
        fl.transit[x.slot_out[ln], f, h] += out
        pm = x.pmark[ln, c]
        if pm <= 0.0:
            continue  # no marking: skip the per-packet accounting
        pkt = wire_pkt if fl.pred[f] != ACK_FLOW else sw.ack_pkt
        acc = pacc[f, h - 1] + out
        if acc >= pkt:
            npk = int(acc * (1.0 / wire_pkt)) if pkt == wire_pkt else int(acc / pkt)
            pacc[f, h - 1] = acc - npk * pkt
            m = _binomial(rng, npk, pm)
            if m > 0:
                lk.counters[ln, c, C_MARKS] += m
                if fl.pred[f] == ACK_FLOW:
                    continue  # a marked ACK counts, but the NP answers data only
                # the marked packet still crosses the downstream queues (their current
                # delay, capped by the ring) and cables before the NP sees it
                ring2 = fl.ce_ring.shape[0]
                qd = 0.0
                for h2 in range(h + 1, hops):
                    l2 = path[f, h2]
                    qd += x.qseen[l2, c] / lk.cap[l2]
                dly = fl.rd[f, h] + int(qd / dt)
                if dly > ring2 - 1:
                    dly = ring2 - 1
                s2 = (t + dly) % ring2
                fl.ce_ring[s2, f] += m
                fl.ce_count[s2] += m
        else:
            pacc[f, h - 1] = acc


@_jit
def _received(ff: np.ndarray, fl: FlowState, pr: int, f: int) -> float:
    """What flow ``f`` may forward of predecessor ``pr``'s deliveries: all of it, or only
    whole ``quantum`` chunks (store and forward per chunk, NCCL Tree) until ``pr`` is done."""
    d = ff[pr, DELIV]
    q = fl.quantum[f]
    if q > 0.0 and d < fl.size[pr] * (1.0 - 1e-9) - 1e-6:
        d = np.floor(d / q) * q
    return d


@_jit
def injection(dt: float, lk: LinkState, sw: SwitchState, fl: FlowState, x: Scratch,
              lrate: np.ndarray, sample: bool) -> None:
    """NICs inject each flow at min(DCQCN rate, offered load, ring credit), share the port
    max-min between QPs (the NIC's arbiter) and stop while the port is paused.

    Port by port, over the port's live QPs (``nic_idx``, in flow order): a QP's offer and send
    touch only its own state and its port's, so a port's QPs stay in cache from offer to send
    and the result is that of all offers, then all arbiters, then all sends. With ``sample``,
    the sends also add each flow's DCQCN rate to the links it crosses (``lrate``, for the time
    series' next point: ``link_rate``)."""
    idx, ptr = fl.nic_idx, fl.nic_ptr
    if sample:
        lrate[:, :] = 0.0
    for ln in range(lk.cap.shape[0]):
        if lk.src_nic[ln] < 0:
            continue  # a switch port: no QPs start there
        i0 = ptr[ln]
        for i in range(i0, ptr[ln + 1]):
            x.offer[i - i0] = offer(idx[i], ln, dt, fl, x)
        nic_arbiter(ln, dt, lk, sw, fl, x)
        r0 = 0.0
        n0 = 0.0
        for i in range(i0, ptr[ln + 1]):
            f = idx[i]
            send(f, ln, x.offer[i - i0], lk, fl, x)
            if sample:
                r = sending_rate(f, fl)
                if r >= 0.0:
                    # hop 0 is this port for every QP here: summed in a register
                    r0 += r
                    n0 += 1.0
                    for h in range(1, fl.hops[f]):
                        l2 = fl.path[f, h]
                        lrate[l2, 0] += r
                        lrate[l2, 1] += 1.0
        if sample:
            lrate[ln, 0] += r0
            lrate[ln, 1] += n0


@_jit
def offer(f: int, ln: int, dt: float, fl: FlowState, x: Scratch) -> float:
    """What flow ``f`` offers its NIC port ``ln`` this step, added to the port's total."""
    ff = fl.ff
    rem = ff[f, REMAIN]
    if rem <= 0.0:
        return 0.0
    c = fl.cls[f]
    if x.serve_frac[ln, c] != 0.0:  # NIC egress paused for this priority
        return 0.0
    r = ff[f, RC]
    if fl.cap[f] < r:
        r = fl.cap[f]
    b = r * dt
    if rem < b:
        b = rem
    pr = fl.pred[f]
    if pr >= 0:  # at most ``chunk`` ahead of what the predecessor(s) delivered
        credit = _received(ff, fl, pr, f) + fl.chunk[f] - ff[f, SENT]
        pr = fl.pred2[f]
        if pr >= 0:
            credit = min(credit, _received(ff, fl, pr, f) + fl.chunk[f] - ff[f, SENT])
        if credit < b:
            b = credit
    if b <= 0.0:
        return 0.0
    x.nic_tot[ln, c] += b
    if c == 0:
        x.nic_nq[ln] += 1.0
    return b


@_jit
def nic_arbiter(ln: int, dt: float, lk: LinkState, sw: SwitchState, fl: FlowState,
                x: Scratch) -> None:
    """NIC port ``ln`` serves its QPs' offers (``x.offer``, in the port's QP order): WRR between
    the classes, max-min inside one."""
    d0 = x.nic_tot[ln, 0]
    d1 = x.nic_tot[ln, 1]
    s0, s1 = _wrr(lk.cap[ln] * dt, d0, d1, sw.w_roce, _NO, _NO)
    x.serve_bytes[ln, 0] = 1.0
    x.serve_bytes[ln, 1] = 1.0
    # an oversubscribed port: the NIC's QP arbiter shares it max-min fairly
    if s0 < d0 * (1.0 - 1e-12):
        _waterfill(x.offer, fl.nic_idx, fl.nic_ptr[ln], fl.nic_ptr[ln + 1], fl.cls, _CLS0, s0,
                   x.wf)
    if s1 < d1 * (1.0 - 1e-12):
        _waterfill(x.offer, fl.nic_idx, fl.nic_ptr[ln], fl.nic_ptr[ln + 1], fl.cls, _CLS1, s1,
                   x.wf)


@_jit
def send(f: int, ln: int, b: float, lk: LinkState, fl: FlowState, x: Scratch) -> None:
    """Flow ``f`` puts the ``b`` bytes its port ``ln`` granted on the wire."""
    ff = fl.ff
    if b <= 0.0:
        return
    c = fl.cls[f]
    ff[f, REMAIN] -= b
    ff[f, SENT] += b
    ff[f, INFL] += b
    if fl.n_active[0] != 0:  # the byte counter matters only under a rate limiter, and the
        ff[f, BYTECNT] += b  # limiter's allocation restarts it (rp_cnp)
    fl.transit[x.slot_out[ln], f, 0] += b
    lk.counters[ln, c, C_TX] += b


@_jit
def probes(now: float, dt: float, rng: np.ndarray, lk: LinkState, sw: SwitchState, pb: ProbeState,
           x: Scratch) -> None:
    """Latency probes start on schedule and advance through the queues they meet: the bytes
    ahead of them (fluid queue + a sampled microburst) drain first, pauses included. At the
    sending NIC a probe is one more QP in the port's round-robin arbiter: it waits for one
    packet of each other RoCE QP (ACKs included) that has one ready (each of the k QPs with
    bytes to send is ready with probability u, the port's offered load this step, capped at 1).
    With a return leg (``Probes.until == "ack"``, from hop ``back`` on) the receiver's ACK
    leaves its NIC from the strict-priority queue (no wait behind the data QPs; paused with
    the priority) and queues with the data in the switches, as the probe did."""
    n_inst = pb.inst.shape[0]
    wire_pkt = sw.wire_pkt
    for p in range(pb.hops.shape[0]):
        if pb.next[p] < now + dt:
            for i in range(n_inst):
                if pb.inst[i] < 0:
                    pb.inst[i] = p
                    pb.hop[i] = 0
                    pb.ahead[i] = -1.0
                    pb.ready[i] = pb.next[p]
                    pb.t0[i] = pb.next[p]
                    break
            pb.next[p] += pb.interval
    for i in range(n_inst):
        p = pb.inst[i]
        if p < 0:
            continue
        while pb.inst[i] >= 0 and pb.ready[i] < now + dt:
            h = pb.hop[i]
            ln = pb.path[p, h]
            tready = pb.ready[i] if pb.ready[i] > now else now
            paused = lk.xoff_hist[x.slot_hist[ln], ln, 0] != 0
            back = pb.back[p]
            if h == 0 or h == back:  # leaving a NIC: the probe's, or its receiver's ACK
                if paused:
                    pb.ready[i] = now + dt
                    break
                depart = tready
                if h == 0:
                    cap = lk.cap[ln] * dt
                    u = x.nic_tot[ln, 0] / cap if cap > 0.0 else 0.0
                    if u > 1.0:
                        u = 1.0
                    depart += x.nic_nq[ln] * u * wire_pkt / lk.cap[ln]
            else:
                if pb.ahead[i] < 0.0:
                    pb.ahead[i] = x.qseen[ln, 0] + 1e-9
                    kb = int(x.burst[ln, 0, 2])
                    if kb > 0:
                        pb.ahead[i] += wire_pkt * _burst_sample(
                            rng, sw.bwork, x.burst[ln, 0, 0], x.burst[ln, 0, 1], kb)
                # bytes ahead drain at the class's service this step; burst packets (not in
                # the fluid queue) drain at least at the class's WRR share
                if paused:
                    sb = 0.0
                else:
                    sb = x.serve_bytes[ln, 0]
                    floor = sw.w_roce * lk.cap[ln] * dt
                    if sb < floor:
                        sb = floor
                if sb <= 0.0 and pb.ahead[i] > 1e-6:
                    pb.ready[i] = now + dt
                    break
                if pb.ahead[i] > sb:
                    pb.ahead[i] -= sb
                    pb.ready[i] = now + dt
                    break
                depart = tready + (dt * pb.ahead[i] / sb if sb > 0.0 else 0.0)
            wire = pb.wire if h < back else pb.ack_wire
            arrive = depart + wire / lk.cap[ln] + lk.delay[ln] * dt
            if h + 1 >= pb.hops[p]:
                k = pb.n_lat[0]
                if k < pb.lat.shape[0]:
                    pb.lat[k] = arrive - pb.t0[i]
                    pb.lat_t[k] = pb.t0[i]
                    pb.n_lat[0] = k + 1
                pb.inst[i] = -1
            else:
                pb.hop[i] = h + 1
                pb.ahead[i] = -1.0
                pb.ready[i] = arrive


@_jit
def _drop_finished_from_ports(fl: FlowState, gr: GroupState) -> None:
    """Remove the flows of finished collectives from the per-port QP lists (``nic_idx`` /
    ``nic_ptr``, in place and in order) that the NIC arbiter scans every step. Exact: those
    flows offer nothing any more, and adding their zero offers changed no sum."""
    idx, ptr = fl.nic_idx, fl.nic_ptr
    lo = ptr[0]
    k = 0
    for ln in range(ptr.shape[0] - 1):
        hi = ptr[ln + 1]
        ptr[ln] = k
        for i in range(lo, hi):
            f = idx[i]
            g = fl.group[f]
            if g >= 0 and gr.iter[g] >= gr.iters[g]:
                continue
            idx[k] = f
            k += 1
        lo = hi
    ptr[ptr.shape[0] - 1] = k


@_jit
def collectives(t: int, now: float, lk: LinkState, fl: FlowState, gr: GroupState,
                lrate: np.ndarray, sample: bool) -> None:
    """An iteration ends when every flow of the group delivered its bytes; the next one
    restarts them, and a finished group's flows leave the live list. With ``sample``,
    ``lrate`` (summed by ``injection`` before the sends' end state changed here) is kept equal
    to ``link_rate`` over the live flows: restarted flows are added, and when a group ends
    the sums are made again over the flows left."""
    ff = fl.ff
    stale = False
    for g in range(gr.iters.shape[0]):
        if gr.iter[g] >= gr.iters[g]:
            continue
        done = True
        f = gr.cur[g]  # flows before the cursor finished this iteration already
        while f < gr.f1[g]:
            if ff[f, DELIV] < fl.size[f] * (1.0 - 1e-9) - 1e-6:
                done = False
                break
            f += 1
        gr.cur[g] = f
        if not done:
            continue
        gr.cur[g] = gr.f0[g]
        gr.times[g, gr.iter[g]] = now - gr.start[g]
        gr.iter[g] += 1
        gr.start[g] = now
        if gr.iter[g] < gr.iters[g]:
            for f in range(gr.f0[g], gr.f1[g]):
                counted = ff[f, REMAIN] > 0.0
                ff[f, REMAIN] = fl.size[f]
                ff[f, SENT] = 0.0
                ff[f, DELIV] = 0.0
                ff[f, INFL] = 0.0
                if sample and not counted:
                    link_rate(np.uint32(f), fl, lrate)
        else:
            for f in range(gr.f0[g], gr.f1[g]):
                ff[f, REMAIN] = 0.0
                ff[f, INFL] = 0.0
            # the group is over: drop its flows from the live list (exact: they never send
            # again, so their DCQCN state no longer matters)
            k = 0
            for jf in range(fl.n_live[0]):
                f = fl.live[jf]
                gf = fl.group[f]
                if gf >= 0 and gr.iter[gf] >= gr.iters[gf]:
                    continue
                fl.live[k] = f
                k += 1
            fl.n_live[0] = k
            count_ingress(fl.live, np.int64(k), fl.hops, fl.path, fl.pair, fl.cls,  # see _ONE
                          fl.pair_stamp, lk.nfl, -2 - t)
            _drop_finished_from_ports(fl, gr)
            stale = sample  # (a flow can finish with a few bytes short of REMAIN = 0)
    if stale:
        lrate[:, :] = 0.0
        for jf in range(fl.n_live[0]):
            link_rate(fl.live[jf], fl, lrate)


@_jit
def sending_rate(f: int, fl: FlowState) -> float:
    """Flow ``f``'s DCQCN rate (capped by its offered rate) if it has data to send, else -1."""
    ff = fl.ff
    if ff[f, REMAIN] > 0.0 and fl.pred[f] != ACK_FLOW:
        r = ff[f, RC]
        if fl.cap[f] < r:
            r = fl.cap[f]
        return r
    return -1.0


@_jit
def link_rate(f: int, fl: FlowState, lrate: np.ndarray) -> None:
    """Adds flow ``f``'s DCQCN rate to the links it crosses, if it is sending data."""
    r = sending_rate(f, fl)
    if r >= 0.0:
        for h in range(fl.hops[f]):
            ln = fl.path[f, h]
            lrate[ln, 0] += r
            lrate[ln, 1] += 1.0


@_jit
def time_series(t: int, now: float, lk: LinkState, fl: FlowState, ts: SeriesState,
                x: Scratch) -> None:
    """Per-link queue, pause and mean DCQCN rate; adaptive decimation keeps <= cap points."""
    record(t, now, lk, fl, ts, x, True)


@_jit
def record(t: int, now: float, lk: LinkState, fl: FlowState, ts: SeriesState, x: Scratch,
           recount: bool) -> None:
    """``time_series``; with ``recount`` False, ``ts.lrate`` already holds this step's
    per-link rate sums (``injection`` adds them up in the previous step's sends, and
    ``collectives`` keeps them equal to ``link_rate`` over the live flows)."""
    if t % ts.every[0] != 0:
        return
    n_links = lk.cap.shape[0]
    if ts.n[0] >= ts.t.shape[0]:
        half = ts.n[0] // 2
        for k in range(half):
            ts.t[k] = ts.t[2 * k + 1]
            for ln in range(n_links):
                ts.q[k, ln] = ts.q[2 * k + 1, ln]
                ts.paused[k, ln] = ts.paused[2 * k + 1, ln]
                ts.rate[k, ln] = ts.rate[2 * k + 1, ln]
        ts.n[0] = half
        ts.every[0] *= 2
    k = ts.n[0]
    ts.t[k] = now
    lrate = ts.lrate
    for ln in range(n_links):
        ts.q[k, ln] = (lk.qprev[ln, 0] + lk.qprev[ln, 1] + x.burst[ln, 0, 3]
                       + x.burst[ln, 1, 3])
        ts.paused[k, ln] = lk.xoff_hist[x.slot_hist[ln], ln, 0]
    if recount:  # mean DCQCN rate of the sending flows routed through each link
        lrate[:, :] = 0.0
        for jf in range(fl.n_live[0]):
            link_rate(fl.live[jf], fl, lrate)
    for ln in range(n_links):
        ts.rate[k, ln] = lrate[ln, 0] / lrate[ln, 1] if lrate[ln, 1] > 0.0 else 0.0
    ts.n[0] = k + 1


@_jit
def all_done(gr: GroupState) -> bool:
    """True when there are collectives and every one finished its iterations."""
    n = gr.iters.shape[0]
    if n == 0:
        return False
    for g in range(n):
        if gr.iter[g] < gr.iters[g]:
            return False
    return True


# ---------------------------------------------------------------- the state handed to run
# Called from Python with its eight structures (107 arrays), ``run`` needs a CPython wrapper
# that unboxes each array: compiling that wrapper took 1.1-1.8 s of ``run``'s 3.3-4.1 s
# compile, the part of a cold first run that no second process can share (docs/benchmarks.md,
# "First run": ~0.5 s less in all, measured side by side). Instead Python writes each field's
# address, shape and strides (or a scalar's bits) into an int64 table (``state_table``), and
# ``unpack`` rebuilds the structures inside ``run`` from the table and their numba type
# (``state_ref``): the same memory, read and written as before. The caller keeps the
# structures alive for the call and passes the type of the very structures the table was
# written from; ``unpack`` trusts the two to agree. It lives here because numba's cache of
# ``run`` is keyed on this file alone.

MAX_NDIM = 3
COLS = 1 + 2 * MAX_NDIM  # address or scalar bits, shape, strides in bytes
# Trailing dimensions ``run`` compiles as constants (``state_table`` checks them): numba
# indexes a C-contiguous array through its shape, and the class axis of the [link, class]
# arrays that ``arrive`` and ``mark`` read at each hop of each flow, known, saves reloading its
# width at every access: 567 -> 539 instructions per live flow-step of the 64-NIC all-to-all
# (bench/kernel_profile.py's count). Not every class axis: with all 17 the count was 12 above
# these six's, LLVM's register allocation deciding the rest (docs/benchmarks.md).
CONST_DIMS = {("LinkState", "q"): (2,), ("LinkState", "ing"): (2,),
              ("LinkState", "arr_lim"): (2,), ("Scratch", "serve_frac"): (2,),
              ("Scratch", "pmark"): (2,), ("Scratch", "qseen"): (2,)}


class StateRef(types.TypeRef):
    """The numba type of the structures, passed to ``run`` as a value (``state_ref``).

    Keyed by its name, which spells every field's type, and the structures' classes: numba's
    dispatcher hashes each argument's type on every call, and hashing the nested tuple type
    field by field cost ~100 µs per ``Simulation.advance`` (against ~20 µs for the rest)."""

    @property
    def key(self) -> Any:  # numba declares a Type; any hashable key will do
        # from attributes every TypeRef has: a StateRef unpickled from numba's cache index
        # was never constructed here
        structs: Any = self.instance_type
        return self.name, tuple(getattr(t, "instance_class", None) for t in structs.types)


register_default(StateRef)(models.OpaqueModel)  # as numba's TypeRef: no data


def state_ref(state: tuple[Any, ...]) -> StateRef:
    """``run``'s ``state_type`` argument for ``state``."""
    return StateRef(numba.typeof(state))


def state_table(state: tuple[Any, ...]) -> np.ndarray:
    """One row per field of each structure, in order: an array's address, shape and strides;
    a float's IEEE bits or an int's (or bool's) value in column 0."""
    rows = []
    for struct in state:
        for name, v in zip(struct._fields, struct, strict=True):
            row = [0] * COLS
            if isinstance(v, np.ndarray):
                where = f"{type(struct).__name__}.{name}"
                if v.ndim > MAX_NDIM:
                    raise ValueError(f"{where}: {v.ndim} dimensions, "
                                     f"the kernel takes at most {MAX_NDIM}")
                const = CONST_DIMS.get((type(struct).__name__, name), ())
                if const and v.shape[v.ndim - len(const):] != const:
                    raise ValueError(f"{where}: shape {v.shape}, the kernel is compiled for "
                                     f"[..., {', '.join(map(str, const))}]")
                row[0] = v.ctypes.data
                row[1:1 + v.ndim] = v.shape
                row[1 + MAX_NDIM:1 + MAX_NDIM + v.ndim] = v.strides
            elif isinstance(v, float):
                row[0] = int(np.float64(v).view(np.int64))
            else:
                row[0] = int(v)
            rows.append(row)
    return np.array(rows, dtype=np.int64)


def _field(context: Any, builder: ir.IRBuilder, cell: Any, fty: types.Type,
           where: str, const: tuple[int, ...] = ()) -> Any:
    """The value of one field of numba type ``fty`` from its table row (``cell(k)``: column k),
    an array's last ``len(const)`` dimensions the constants ``const``."""
    if isinstance(fty, types.Array):
        if fty.ndim > MAX_NDIM:
            raise TypingError(f"{where}: {fty.ndim}-d array, at most {MAX_NDIM}")
        ary = make_array(fty)(context, builder)
        dtype = context.get_data_type(fty.dtype)
        populate_array(
            ary, data=builder.inttoptr(cell(0), dtype.as_pointer()),
            shape=[cell(1 + d) for d in range(fty.ndim - len(const))]
            + [context.get_constant(types.intp, n) for n in const],
            strides=[cell(1 + MAX_NDIM + d) for d in range(fty.ndim)],
            itemsize=context.get_constant(types.intp, context.get_abi_sizeof(dtype)),
            meminfo=None)
        return ary._getvalue()
    if fty == types.float64:
        return builder.bitcast(cell(0), ir.DoubleType())
    if fty == types.int64:
        return cell(0)
    if fty == types.boolean:
        return builder.icmp_signed("!=", cell(0), ir.Constant(ir.IntType(64), 0))
    raise TypingError(f"{where}: {fty} cannot be passed in the state table")


def _unpack(typingctx: Any, table: types.Type, state_type: types.Type, index: types.Type) -> Any:
    """Structure number ``index`` (a constant) of those ``state_table`` wrote into ``table``,
    as typed in ``state_type`` (a ``TypeRef`` of their tuple). One structure per call: one
    value of all of them is a ~1000-field aggregate that cost LLVM a second to take apart."""
    if not (isinstance(table, types.Array) and table.dtype == types.int64 and table.ndim == 2
            and table.layout == "C"):
        raise TypingError(f"unpack: the table must be a C-contiguous 2-d int64 array, not {table}")
    if not isinstance(state_type, types.TypeRef):
        raise TypingError(f"unpack: state_type must be a type, not {state_type}")
    if not isinstance(index, types.IntegerLiteral):
        raise TypingError(f"unpack: index must be a constant, not {index}")
    structs = state_type.instance_type.types
    nt = structs[index.literal_value]
    first = sum(len(s.types) for s in structs[:index.literal_value])

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        data = make_array(table)(context, builder, args[0]).data
        fields = []
        for k, fty in enumerate(nt.types):
            base = (first + k) * COLS

            def cell(col: int, base: int = base) -> Any:
                return builder.load(cgutils.gep(builder, data, base + col))
            const = CONST_DIMS.get((nt.instance_class.__name__, nt.fields[k]), ())
            fields.append(_field(context, builder, cell, fty, f"{nt}.{k}", const))
        return context.make_tuple(builder, nt, fields)

    return nt(table, state_type, index), codegen


unpack: Any = intrinsic(prefer_literal=True)(_unpack)


@njit(cache=True, error_model="numpy", _nrt=False, nogil=True,  # type: ignore[call-overload]
      no_cfunc_wrapper=True)
def run(n_steps: int, t0: int, dt: float, max_steps: int, rng: np.ndarray, table: np.ndarray,
        state_type: object) -> int:
    """Advance ``n_steps`` steps from step ``t0``; returns the step reached.

    The structures come as ``state_table`` of them and ``state_ref``, their numba type (see
    above: a Python entry point taking them one by one made the first compile slower).
    Stops early when every collective finished its iterations (if there are collectives) or at
    ``max_steps``. The phase order is the model (see ``rocesim.engine``'s docstring).

    Compiled without numba's reference counting (``_nrt=False``): nothing here allocates, and
    counting the references each phase takes to the structures' arrays doubled the cost of a
    small step (1.1 -> 2.5 µs on S1).
    """
    links, switches = unpack(table, state_type, 0), unpack(table, state_type, 1)
    nics, flows = unpack(table, state_type, 2), unpack(table, state_type, 3)
    groups, probe = unpack(table, state_type, 4), unpack(table, state_type, 5)
    series, scratch = unpack(table, state_type, 6), unpack(table, state_type, 7)
    ring = flows.transit.shape[0]
    live = flows.live
    t = t0
    t_end = min(t0 + n_steps, max_steps)
    owed = False  # the time series' record of step t is still to be made
    while t < t_end:
        if all_done(groups):
            break
        now = t * dt
        slot = t % ring
        slot2 = t % flows.ce_ring.shape[0]
        slot3 = t % flows.cnp_ring.shape[0]
        # per-flow phases run fused in passes over the live flows (on a large fabric the
        # memory traffic is the cost); within a pass each flow goes through the phases in
        # order, and no phase reads what another flow's later phase in the pass writes, so the
        # result is that of running the phases one after the other
        # (notify and react run only if a mark or CNP is due or a limiter is allocated, as in
        # notification_point and reaction_point: otherwise they would do nothing)
        do_np = flows.ce_count[slot2] != 0
        do_rp = flows.cnp_count[slot3] != 0 or flows.n_active[0] != 0
        for jf in range(flows.n_live[0]):
            f = live[jf]
            arrive(f, slot, links, switches, flows)
            if do_np:
                notify(f, t, slot2, now, dt, nics, flows, links, scratch)
            if do_rp:
                react(f, slot3, now, dt, nics, flows)
        flows.ce_count[slot2] = 0
        flows.cnp_count[slot3] = 0
        if owed:
            record(t, now, links, flows, series, scratch, False)
            owed = False
        pfc(slot, now, dt, links, switches)
        service(t, slot, now, dt, links, switches, scratch)
        marking(t, dt, rng, links, switches, flows, scratch)
        # the time series' next point needs the link rates of this step's end state
        sample = (t + 1) % series.every[0] == 0
        injection(dt, links, switches, flows, scratch, series.lrate, sample)
        probes(now, dt, rng, links, switches, probe, scratch)
        t += 1
        collectives(t, t * dt, links, flows, groups, series.lrate, sample)
        owed = True
    if owed:
        record(t, t * dt, links, flows, series, scratch, False)
    return t
