"""Fabric checks: ECMP balance, foreign DSCPs in the RoCE queue, PFC pause at idle ports.

``check(cluster, exp) -> (findings, not_checked)`` is the edge: on the simulator it runs one
AlltoAll stress over the canary's NICs (the experiment's largest AlltoAll, one iteration, its QPs
per connection, with the experiment's background tenants) and hands the counters and per-flow
paths to the pure functions below; on SSH a check that lacks what it needs is ``NotChecked``.

* ``ecmp_findings``: per leaf, the tx bytes of its uplinks under the stress. A leaf is flagged
  when its imbalance is both material and not the lumpiness of random hashing: a link carries
  ``HOT_RATIO`` (1.5, i.e. >= 50 %) times the median of its group or more, AND random uniform
  hashing of the same flows (their bytes) would load one link that much with probability below
  ``FALSE_REFUSAL`` / (leaves tested) (``random_hash_tail``). The finding names the hot links
  and the flows (5-tuples) hashed onto them, the flows sharing one UDP source port, and is
  ``dominant``: tuning ECN would only paper over it.
* ``dscp_findings``: bytes of a DSCP other than the RoCE one in the RoCE queue (the backup job
  the switch's DSCP map puts into the lossless queue).
* ``pause_findings``: PFC pause received on the RoCE priority by a port that sent no RoCE
  traffic: the pauses hold back someone else's traffic in that priority.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.diagnose.finding import Finding, NotChecked

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster
    from tuner.experiment import Experiment

HOT_RATIO = 1.5  # issue #23: one link carrying >= 50 % more than the median of its group
# A fixed ratio alone refuses healthy fabrics: with 16 flows per-QP-hashed onto 4 uplinks, one
# link carries >= +50 % over the median in 61 % of the draws. So a leaf is also tested
# against the null "each flow hashed independently and uniformly onto the group's links" (what
# per-QP source ports under a SRC_IP/DST_IP/L4_SRC_PORT hash give), and flagged only when its
# hot link is improbable under it. FALSE_REFUSAL is the budget for refusing a healthy fabric:
# at most one preflight in a thousand, split Bonferroni-wise over the leaves tested (so
# 5e-4 per leaf with two leaves). The tail is an upper bound (``random_hash_tail``), so the
# real false-refusal rate is below the budget. Derived from the null, not fitted to examples.
FALSE_REFUSAL = 1e-3
ROCE_TC = 3
ROCE_DSCP = 26  # rocesim.workload.ROCE_DSCP: NVIDIA's lossless RoCE default (prio 3)
ROCEV2_DPORT = 4791  # IANA: the RoCEv2 UDP destination port
STRESS_BYTES = 4 * 2**20  # AlltoAll size when the experiment has none
MAX_FLOWS_NAMED = 8
CHECKS = ("ecmp_balance", "roce_queue_dscp", "pause_without_roce")

ECMP_CAUSE = ("ECMP hash collision: the leaf's hash puts the heavy flows on the same uplink "
              "while its other uplinks idle; the collective runs at the hot link's pace")
ECMP_ACTION = ("spread the flows, not the ECN marks: hash on SRC_IP, DST_IP and L4_SRC_PORT "
               "(SONiC ECMP_HASH / NVUE ecmp-hash); give every QP its own UDP source port "
               "(source-port entropy); raise NCCL_IB_QPS_PER_CONNECTION (e.g. 4) so each "
               "peer pair uses several 5-tuples; use adaptive routing where the ASIC has it "
               "(Spectrum AR)")


@dataclass(frozen=True)
class FlowPath:
    """One flow of the stress: its 5-tuple, the leaf uplink it was hashed onto, its bytes."""

    src: str
    dst: str
    sport: int
    uplink: str
    bytes: float

    @property
    def five_tuple(self) -> str:
        return f"{self.src}:{self.sport} -> {self.dst}:{ROCEV2_DPORT} udp"


def _leaf(port: str) -> str:
    return port.split("/", 1)[0]


def random_hash_tail(weights: list[float], links: int, load: float) -> float:
    """An upper bound on P(some one of ``links`` links carries >= ``load`` bytes) when flows of
    ``weights`` bytes are each hashed independently and uniformly onto the links.

    Union bound over the links (``links`` x the tail of one link) of the Chernoff bound with
    the exact moment generating function of one link's load, a sum of the weights each present
    with probability 1/k: ``inf_t exp(-t load) prod_i (1 - 1/k + exp(t w_i) / k)``. It uses
    the flow sizes, not only their count (one elephant flow makes any link probable), and is
    exact for ``load`` equal to the total (all flows on one link: k^(1 - n))."""
    k = int(links)
    w = np.asarray([x for x in weights if x > 0], dtype=float)
    if k < 2 or w.size == 0:
        return 1.0
    scale = float(w.max())
    w, s = w / scale, load / scale  # units of the largest flow: no overflow in exp(t w)
    total = float(w.sum())
    if s <= total / k:
        return 1.0
    if s >= total * (1 - 1e-12):
        return min(1.0, math.exp(math.log(k) - w.size * math.log(k)))
    log_stay, log_k, log_k1 = math.log((k - 1) / k), math.log(k), math.log(k - 1)

    def slope(t: float) -> float:  # d/dt of the log bound; increasing (convex bound)
        return float(np.sum(w / (1 + np.exp(log_k1 - t * w)))) - s

    lo, hi = 0.0, 1.0
    while slope(hi) < 0:  # slope(inf) = total - s > 0: ends
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
    log_one = float(np.sum(np.logaddexp(log_stay, hi * w - log_k))) - hi * s
    return min(1.0, math.exp(log_k + log_one))


def ecmp_findings(uplink_tx_bytes: dict[str, int], flows: list[FlowPath], read_from: str,
                  ratio: float = HOT_RATIO, budget: float = FALSE_REFUSAL) -> list[Finding]:
    """Hot uplinks per leaf (ports ``leaf/EthernetN``; a leaf with one uplink has no choice):
    at least ``ratio`` x the group's median in tx bytes, and improbable under random hashing of
    the leaf's ``flows`` (see ``FALSE_REFUSAL``); without flows nothing is improbable."""
    groups: dict[str, dict[str, int]] = defaultdict(dict)
    for port, tx in uplink_tx_bytes.items():
        groups[_leaf(port)][port] = int(tx)
    tested = {leaf: links for leaf, links in groups.items()
              if len(links) >= 2 and any(links.values())}
    alpha = budget / max(1, len(tested))
    out = []
    for leaf, links in sorted(tested.items()):
        med = statistics.median(links.values())
        hot = [p for p, tx in links.items() if tx > 0 and tx >= ratio * med]
        if not hot:
            continue
        mine = [f for f in flows if f.uplink in links]
        load: dict[str, float] = defaultdict(float)
        for f in mine:
            load[f.uplink] += f.bytes
        tail = random_hash_tail([f.bytes for f in mine], len(links), max(load.values(), default=0))
        if tail >= alpha:
            continue
        on_hot = sorted((f for f in mine if f.uplink in hot), key=lambda f: -f.bytes)
        named = "; ".join(f.five_tuple for f in on_hot[:MAX_FLOWS_NAMED])
        more = len(on_hot) - MAX_FLOWS_NAMED
        excess = ", ".join(f"{p} {_over(links[p], med)}" for p in hot)
        counts = ", ".join(f"{p} {tx}" for p, tx in sorted(links.items()))
        sport, shared = Counter(f.sport for f in on_hot).most_common(1)[0]
        same = f"; {shared} of them share UDP source port {sport}" if shared > 1 else ""
        out.append(Finding(
            layer="fabric", check="ecmp_balance", where=leaf,
            evidence=(f"uplink tx bytes under AlltoAll ({read_from}): {counts}; median "
                      f"{med:.0f}; hot: {excess}; {len(on_hot)} flows hashed onto the hot "
                      f"link(s): {named}" + (f" (+{more} more)" if more > 0 else "") + same
                      + f"; P(random hashing of these {len(mine)} flows loads one of the "
                      f"{len(links)} links this much) <= {tail:.1g}, below {alpha:.1g}"),
            cause=ECMP_CAUSE, action=ECMP_ACTION, dominant=True))
    return out


def _over(tx: int, median: float) -> str:
    return "(median 0)" if median <= 0 else f"(+{tx / median - 1:.0%})"


def dscp_findings(queue_dscp_bytes: dict[str, dict[int, float]], read_from: str,
                  roce_dscp: int = ROCE_DSCP) -> list[Finding]:
    """Ports whose RoCE queue carried bytes of another DSCP than ``roce_dscp``."""
    out = []
    for port, by_dscp in sorted(queue_dscp_bytes.items()):
        foreign = {d: b for d, b in by_dscp.items() if d != roce_dscp and b > 0}
        if not foreign:
            continue
        shown = ", ".join(f"DSCP {d}: {int(b)} B" for d, b in sorted(by_dscp.items()) if b > 0)
        names = ", ".join(str(d) for d in sorted(foreign))
        out.append(Finding(
            layer="fabric", check="roce_queue_dscp", where=port,
            evidence=f"queue {ROCE_TC} tx bytes by DSCP ({read_from}): {shown}",
            cause=(f"traffic marked DSCP {names} shares the RoCE (lossless) queue: the "
                   "switch's DSCP map puts another tenant (a backup or storage job) into it, "
                   "so its bursts raise PFC pauses and ECN marks on the training flows"),
            action=(f"map DSCP {names} to a queue of its own in the switch's DSCP_TO_TC_MAP "
                    "(`sonic-db-cli CONFIG_DB hgetall 'DSCP_TO_TC_MAP|AZURE'`) or re-mark "
                    f"the tenant; keep queue {ROCE_TC} for DSCP {roce_dscp}")))
    return out


def pause_findings(pause_rx: dict[str, int], roce_tx_bytes: dict[str, float],
                   read_from: str) -> list[Finding]:
    """Ports that received RoCE-priority pause frames while sending no RoCE-DSCP traffic."""
    out = []
    for port, frames in sorted(pause_rx.items()):
        if frames <= 0 or roce_tx_bytes.get(port, 0.0) > 0:
            continue
        out.append(Finding(
            layer="fabric", check="pause_without_roce", where=port,
            evidence=(f"{frames} PFC pause frames received on priority {ROCE_TC} "
                      f"({read_from}) with 0 bytes of RoCE (DSCP {ROCE_DSCP}) sent"),
            cause=("the pauses hold back traffic that is not the RoCE job's: another tenant "
                   "in the lossless priority, or pauses spreading from a congested neighbour"),
            action=("find what this port sends in the RoCE priority (queue counters by DSCP) "
                    "and move it out of the lossless class; check the PFC watchdog")))
    return out


# ---- the simulator edge -------------------------------------------------------------------

def _stress_workload(exp: Experiment) -> Any:
    from tuner.workload import BackgroundPart, CollectivePart, Workload

    a2a = [p for p in exp.workload.parts
           if isinstance(p, CollectivePart) and p.op == "alltoall"]
    size = max((p.size_bytes for p in a2a), default=STRESS_BYTES)
    qps = max((p.qps_per_connection for p in a2a), default=1)
    bgs = [p for p in exp.workload.parts if isinstance(p, BackgroundPart)]
    part = CollectivePart(op="alltoall", size_bytes=size, iterations=1, qps_per_connection=qps)
    return Workload(parts=[part, *bgs], time_limit_s=exp.workload.time_limit_s)


def sim_findings(res: Any, ports: list[str], nic_names: list[str],
                 read_from: str) -> list[Finding]:
    """The three checks over one rocesim result (counters + ``flows``: paths, bytes, DSCPs)."""
    fl = res.flows
    uplinks = set(res.uplink_bytes)
    paths: list[FlowPath] = []
    dscp_bytes: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    roce_tx: dict[str, float] = defaultdict(float)
    for i in range(len(fl["src"])):
        if int(fl["kind"][i]) == 2:  # ACK flows: not modelled unless ack_bytes > 0
            continue
        got = float(fl["delivered_bytes"][i])
        dscp, tc = int(fl["dscp"][i]), int(fl["tc"][i])
        hops = [ports[int(li)] for li in fl["path"][i] if int(li) >= 0]
        for port in hops:
            if tc == ROCE_TC:
                dscp_bytes[port][dscp] += got
            if dscp == ROCE_DSCP:
                roce_tx[port] += got
        up = next((p for p in hops if p in uplinks), None)
        if up is not None:
            paths.append(FlowPath(nic_names[int(fl["src"][i])], nic_names[int(fl["dst"][i])],
                                  int(fl["udp_sport"][i]), up, got))
    pause = {p: int(row.get(f"rx_prio{ROCE_TC}_pause", row.get(f"pfc{ROCE_TC}_rx_pkts", 0)))
             for p, row in res.counters.items()}
    switch_queues = {p: d for p, d in dscp_bytes.items() if p not in nic_names}
    return (ecmp_findings(dict(res.uplink_bytes), paths, read_from)
            + dscp_findings(switch_queues, read_from)
            + pause_findings(pause, roce_tx, read_from))


def check(cluster: Cluster, exp: Experiment) -> tuple[list[Finding], list[NotChecked]]:
    """The fabric layer on ``cluster`` (sim: one AlltoAll stress; ssh: see ``NotChecked``)."""
    from tuner.cluster.sim import SimCluster

    inner: Any = cluster
    while not isinstance(inner, SimCluster) and getattr(inner, "inner", None) is not None:
        inner = inner.inner  # the state-file / dead-man wrappers
    if not isinstance(inner, SimCluster):
        where = ", ".join(cluster.describe().canary_switches)
        return [], [NotChecked(
            layer="fabric", check="ecmp_balance", where=where,
            reason="the inventory does not say which switch ports are uplinks, so their tx "
                   "bytes cannot be compared")] + [
            NotChecked(layer="fabric", check=c, where=where,
                       reason="per-DSCP queue counters are not read over SSH yet")
            for c in CHECKS[1:]]
    res = inner.stress(_stress_workload(exp))
    read_from = f"rocesim {exp.name}, seed {inner.replicate_seed(0)}"
    ports, nics = inner.flow_names()
    return sim_findings(res, ports, nics, read_from), []

