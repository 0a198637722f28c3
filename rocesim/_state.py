"""The kernel's state, grouped into named structures (built in ``rocesim.engine``).

Each structure is a ``NamedTuple`` of numpy arrays and scalars: numba compiles field access by
name to a constant offset, so naming costs nothing at run time, and building them by keyword
means two arrays of the same type can no longer be swapped silently. Scalars that the kernel
updates are one-element arrays (tuples are immutable). Units: time in µs, data in wire bytes,
rates in bytes/µs; index 0/1 of a class axis is RoCE (TC3) / the other data class.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Flow float state columns (FlowState.ff).
RC, RT, ALPHA, REMAIN, SENT, DELIV, BYTECNT, TTIMER, TALPHA, TCUT, TNPCNP, INFL, TOTDEL = \
    range(13)
NFF = 13
# Flow int state columns (FlowState.fi).
TSTAGE, BSTAGE, ACTIVE, CUTPEND, INCSINCE, CNPPERIOD, NCUTS = range(7)
NFI = 7
# FlowState.pred of a flow that carries another flow's acknowledgements.
ACK_FLOW = -2
# NIC parameter columns (NicState.par, kernel units).
(P_TIME_RESET, P_BYTE_RESET, P_THRESHOLD, P_MAX_RATE, P_AI, P_HAI, P_GD_FAC, P_MIN_DEC,
 P_MIN_RATE, P_FIRST_RATE, P_G, P_ALPHA_RTT, P_RRMP, P_INIT_ALPHA, P_CLAMP, P_CLAMP_TI,
 P_MIN_CNP_GAP, P_LINE, P_CNP_PER_PORT, P_RELEASE) = range(20)
NP_COLS = 20
# NIC counter columns (NicState.ctr).
N_ECN_MARKED, N_CNP_SENT, N_CNP_HANDLED = range(3)
# Link counter columns (LinkState.counters, per class), float64.
(C_TX, C_MARKS, C_DROPS, C_PFC_FRAMES, C_XOFF_US, C_PAUSED_US, C_TRANS, C_WM, C_STORM,
 C_DROP_BYTES) = range(10)
NLC = 10


class LinkState(NamedTuple):
    """Per directed link (a switch egress port or a NIC port) and class."""

    cap: np.ndarray           # [link] bytes/µs
    delay: np.ndarray         # [link] propagation delay in steps
    dst_sw: np.ndarray        # [link] switch at the far end, -1 for a NIC
    src_nic: np.ndarray       # [link] NIC at the near end, -1 for a switch port
    hroom: np.ndarray         # [link] PFC headroom of the ingress port at the far end, bytes
    refresh: np.ndarray       # [link] pause refresh period, µs
    ecn: np.ndarray           # [link, class, (kmin, kmax, pmax, on)]
    counters: np.ndarray      # [link, class, C_*]
    q: np.ndarray             # [link, class] egress queue, bytes
    ing: np.ndarray           # [link, class] bytes from this link held at the far switch
    xoff: np.ndarray          # [link, class] far switch asserts XOFF for this ingress
    xoff_thr: np.ndarray      # [link, class] threshold in force when XOFF was sent
    xoff_hist: np.ndarray     # [ring, link, class] XOFF history (pause reaches upstream later)
    next_refresh: np.ndarray  # [link, class] time of the next pause refresh frame
    paused_since: np.ndarray  # [link, class] start of the current pause, -1 if not paused
    qprev: np.ndarray         # [link, class] backlog the previous step left
    nfl: np.ndarray           # [link, class] ingress ports feeding the queue (burst model)
    arr_lim: np.ndarray       # [link, class] ingress bytes above which arrivals drop (pfc)


class SwitchState(NamedTuple):
    """Switch buffers and the fabric-wide constants of the data classes."""

    buffer: np.ndarray        # [switch] shared buffer, bytes
    sh_used: np.ndarray       # [switch] shared buffer in use (recomputed each step)
    reserve: float            # per (ingress, priority) reserved bytes
    resume: float             # XON offset below the XOFF threshold
    alpha_xoff: float         # dynamic threshold factor of the lossless class
    static_xoff: float        # static XOFF cap, 0 = none
    alpha_lossy: float        # dynamic threshold factor of the lossy class
    cls_lossless: np.ndarray  # [class] 1 if PFC protects it
    n_cls: int                # data classes in use: 1 (RoCE only, class 1 stays idle) or 2
    w_roce: float             # WRR weight of the RoCE class
    wd_detect: float          # PFC watchdog detection time, µs
    wire_pkt: float           # wire bytes of one full data packet
    ack_ratio: float          # ACK wire bytes per data wire byte (0: ACKs not modelled)
    ack_pkt: float            # wire bytes of one ACK
    btail: np.ndarray         # [ingress ports, load step, k] burst_table(.., 1): what a
                              # departing packet leaves behind (marking)
    bwork: np.ndarray         # burst_table(.., 0): the backlog at a random instant (probes)
    bmean: np.ndarray         # [ingress ports, load step] its mean (queue samples, watermark)


class NicState(NamedTuple):
    par: np.ndarray           # [nic, P_*] DCQCN parameters in kernel units
    tcnp: np.ndarray          # [nic] when the port last sent a CNP (per-port moderation)
    ctr: np.ndarray           # [nic, N_*] counters


class FlowState(NamedTuple):
    """One row per QP (flow); ``path``-shaped arrays have one column per hop."""

    path: np.ndarray          # [flow, hop] link ids, -1 past the last hop
    hops: np.ndarray          # [flow]
    cls: np.ndarray           # [flow] data class
    src: np.ndarray           # [flow] sending NIC
    dst: np.ndarray           # [flow] receiving NIC
    pred: np.ndarray          # [flow] flow whose deliveries give credit (ring/tree), -1 none,
                              # ACK_FLOW for a flow of acknowledgements
    pred2: np.ndarray         # [flow] a second one (tree: the other child), -1 none
    ack: np.ndarray           # [flow] the flow carrying this flow's ACKs, -1 none
    group: np.ndarray         # [flow] collective, -1 for background
    rd: np.ndarray            # [flow, hop] steps from hop h to the receiver
    rev: np.ndarray           # [flow] steps for a CNP back to the sender
    cpath: np.ndarray         # [flow, hop] links of the CNPs' path when they share the data
                              # class's queues (as the flow's ACKs), else unused
    chops: np.ndarray         # [flow] hops of cpath, 0: CNPs in a strict-priority class
    cap: np.ndarray           # [flow] offered rate cap, bytes/µs
    size: np.ndarray          # [flow] bytes per iteration (inf for background)
    chunk: np.ndarray         # [flow] bytes a flow may run ahead of its predecessor(s)
    quantum: np.ndarray       # [flow] forwards whole chunks of this size only (tree), 0 none
    pair: np.ndarray          # [flow, hop] (ingress, egress) pair id of each switch hop
    ff: np.ndarray            # [flow, NFF] float state
    fi: np.ndarray            # [flow, NFI] int state
    back: np.ndarray          # [flow, hop - 1] bytes queued at switch hop h's egress
    pacc: np.ndarray          # [flow, hop - 1] fractional packet accumulator for marking
    transit: np.ndarray       # [ring, flow, hop] bytes on the wire, by arrival step
    ce_ring: np.ndarray       # [ring2, flow] CE marks, by step they reach the NP
    cnp_ring: np.ndarray      # [ring3, flow] CNPs, by step they reach the RP
    ce_count: np.ndarray      # [ring2] CE marks written to each slot of ce_ring (0: no NP work)
    cnp_count: np.ndarray     # [ring3] CNPs written to each slot of cnp_ring
    n_active: np.ndarray      # [1] flows whose rate limiter is allocated (ACTIVE)
    live: np.ndarray          # [flow] ids of the flows still taking part
    n_live: np.ndarray        # [1]
    pair_stamp: np.ndarray    # [pair] scratch of count_ingress
    nic_idx: np.ndarray       # flows sorted by first link (CSR values)
    nic_ptr: np.ndarray       # [link + 1] CSR offsets into nic_idx


class GroupState(NamedTuple):
    """Collectives: flows g_f0..g_f1 form one group, repeated ``iters`` times."""

    iters: np.ndarray
    iter: np.ndarray
    start: np.ndarray
    times: np.ndarray         # [group, iteration] µs
    f0: np.ndarray
    f1: np.ndarray
    cur: np.ndarray           # first flow not yet known to have finished this iteration


class ProbeState(NamedTuple):
    path: np.ndarray          # [pair, hop] the probe's links, then its ACK's (until="ack")
    hops: np.ndarray          # [pair]
    back: np.ndarray          # [pair] first hop of the ACK's return leg (= hops: none)
    wire: float               # wire bytes of one probe
    ack_wire: float           # wire bytes of its ACK
    interval: float           # µs between probes of one pair
    next: np.ndarray          # [pair] time of the next probe
    inst: np.ndarray          # [instance] pair of a probe in flight, -1 free
    hop: np.ndarray           # [instance]
    ahead: np.ndarray         # [instance] bytes still ahead in the current queue, -1 unknown
    ready: np.ndarray         # [instance] time it reaches its current hop
    t0: np.ndarray            # [instance] send time
    lat: np.ndarray           # samples, µs
    lat_t: np.ndarray         # sample send times
    n_lat: np.ndarray         # [1]


class SeriesState(NamedTuple):
    every: np.ndarray         # [1] steps between points (doubles when full)
    n: np.ndarray             # [1] points recorded
    t: np.ndarray             # [point]
    q: np.ndarray             # [point, link]
    paused: np.ndarray        # [point, link]
    rate: np.ndarray          # [point, link] mean DCQCN rate of the flows through the link
    lrate: np.ndarray         # [link, 2] scratch: rate sum, flow count


class Scratch(NamedTuple):
    """Per-step values one phase computes for the next ones."""

    serve_frac: np.ndarray    # [link, class] share of the queue served (NIC: paused flag)
    serve_bytes: np.ndarray   # [link, class] bytes served
    nic_tot: np.ndarray       # [link, class] bytes the NIC's QPs offer
    nic_nq: np.ndarray        # [link] RoCE QPs with bytes to send on the NIC port
    pmark: np.ndarray         # [link, class] marking probability of a dequeued packet
    qseen: np.ndarray         # [link, class] queue a packet sees within the step
    burst: np.ndarray         # [link, class, (a, r, kmax, mean bytes)] microburst model
    slot_out: np.ndarray      # [link] transit slot of bytes sent this step
    slot_hist: np.ndarray     # [link] xoff_hist slot in force at the link's sender
    offer: np.ndarray         # [most QPs on one NIC port] this port's offers, in QP order
    wf: np.ndarray            # [most QPs on one NIC port] offers the NIC arbiter levels
