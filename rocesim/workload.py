"""The traffic mix: collectives, background flows and latency probes, and how they become flows.

Collectives (NCCL-like, one QP per channel and connection, each with its own UDP source port):

* ring AllReduce: every rank sends 2(n-1)/n x S to its ring successor, pipelined; a rank can
  run at most one S/n chunk ahead of what it received from its predecessor, so the slowest
  ring edge paces the whole ring (as in NCCL);
* AllGather / ReduceScatter: the same ring with (n-1)/n x S per rank;
* AlltoAll: every rank sends S/n to every other rank at once (no dependency), over
  ``qps_per_connection`` QPs per peer pair (``channels`` applies to rings and trees only);
* tree AllReduce (``algo="tree"``, NCCL's Tree): a double binary tree (``double_binary_tree``,
  NCCL's ncclGetDtree) carries half of S each; on every tree edge the child sends its reduced
  half up and the parent sends the result back down, pipelined in chunks
  (``tree_chunk_bytes``): a rank forwards a chunk up once both children delivered it, and down
  once its parent did (the root: once its children did).

Iterations run back to back; QP (DCQCN) state persists across iterations, as on real NICs.
Background flows are open-ended and capped at ``load`` x line rate; in the RoCE priority they
obey DCQCN, in the ``other`` class they do not react to ECN (lossless on priority 4 or lossy).
Probes are 64-byte messages between random pairs, timed through the queues they meet.
Not modelled: NVLink/PCIe inside a host (one rank per NIC), GPU compute time, NCCL's choice
of algorithm by size (``algo`` is what ``NCCL_ALGO`` forces on a real cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rocesim.config import check_finite

OPS = ("all_reduce", "alltoall", "all_gather", "reduce_scatter")
# The DSCP RoCE traffic is marked with: 26, which NVIDIA's lossless RoCE configuration maps to
# priority 3 (``mlnx_qos --trust dscp``). The switch's DSCP map (SONiC CONFIG_DB
# ``DSCP_TO_TC_MAP``) decides which other DSCPs share that queue.
ROCE_DSCP = 26
BEST_EFFORT_DSCP = 0
ALGOS = ("ring", "tree")
def tree_chunk_bytes(channel_bytes: float, depth: int) -> int:
    """NCCL's pipeline chunk for Tree/Simple: a step of the 4 MiB buffer (NCCL_BUFFSIZE over
    NCCL_STEPS = 8, i.e. 512 KiB), halved while a channel's share holds fewer than 8 x depth
    chunks (down to 128 KiB), 4 x depth (down to 64 KiB) and depth (down to 32 KiB), as
    NCCL's enqueue.cc sizes tree chunks so that the pipeline fills the tree."""
    chunk = 4 * 2**20 // 8
    for per_depth, floor in ((8, 131_072), (4, 65_536), (1, 32_768)):
        while channel_bytes / chunk < depth * per_depth and chunk > floor:
            chunk //= 2
    return chunk


def _btree(n: int, rank: int) -> tuple[int, int, int]:
    """(parent, child0, child1) of ``rank`` in NCCL's binary tree over ranks 0..n-1 (root 0;
    -1 = none). Rank r's lowest set bit b: parent (r ^ b) | 2b, or r ^ b if that is out of
    range; children r - b/2 and r + b', b' the largest of b/2, b/4, ... with r + b' < n."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if n > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    d0 = rank - low if low else -1
    while low and rank + low >= n:
        low >>= 1
    return up, d0, (rank + low if low else -1)


def double_binary_tree(n: int) -> list[list[tuple[int, int, int]]]:
    """NCCL's two trees (src/graph/trees.cc, ncclGetDtree): the binary tree above, and its
    mirror (rank -> n-1-rank) for even n or its shift by one rank for odd n, so that a rank
    that is a leaf in one tree is an inner node in the other. Returns per tree, per rank,
    (parent, child0, child1)."""
    first = [_btree(n, r) for r in range(n)]
    second = []
    for r in range(n):
        if n % 2:
            u, a, b = _btree(n, (r - 1) % n)
            second.append(tuple(-1 if x < 0 else (x + 1) % n for x in (u, a, b)))
        else:
            u, a, b = _btree(n, n - 1 - r)
            second.append(tuple(-1 if x < 0 else n - 1 - x for x in (u, a, b)))
    return [first, second]  # type: ignore[list-item]

# nccl-tests bus bandwidth factors (NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary").
def busbw_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    return (n - 1) / n


@dataclass
class Collective:
    """One NCCL-style collective over ``ranks`` (NIC names), repeated ``iterations`` times."""

    op: Literal["all_reduce", "alltoall", "all_gather", "reduce_scatter"]
    size_bytes: int
    ranks: list[str]
    iterations: int = 5
    channels: int = 4
    qps_per_connection: int = 1
    name: str | None = None
    algo: Literal["ring", "tree"] = "ring"

    def __post_init__(self) -> None:
        check_finite(self)
        if self.op not in OPS:
            raise ValueError(f"Collective.op: unknown op {self.op!r}; expected one of {OPS}")
        if self.size_bytes <= 0:
            raise ValueError(f"Collective.size_bytes must be > 0, got {self.size_bytes}")
        if len(self.ranks) < 2 or len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"Collective {self.label}: needs >= 2 distinct ranks")
        if self.algo not in ALGOS:
            raise ValueError(f"Collective.algo: unknown algorithm {self.algo!r}; expected one "
                             f"of {ALGOS}")
        if self.algo == "tree" and self.op != "all_reduce":
            raise ValueError(f"Collective {self.label}: algo 'tree' is NCCL's Tree, which "
                             "implements all_reduce only")
        for name in ("iterations", "channels", "qps_per_connection"):
            if getattr(self, name) < 1:
                raise ValueError(f"Collective.{name} must be >= 1")

    @property
    def label(self) -> str:
        return self.name or f"{self.op}_{self.size_bytes}"


@dataclass
class Background:
    """Storage/backup traffic at ``load`` x line rate per sender; ``nics`` empty = all NICs.

    incast: ``nics[0]`` receives from the next ``fan_in`` NICs; permutation: every NIC sends
    to a seeded random other NIC.
    """

    pattern: Literal["incast", "permutation"] = "incast"
    load: float = 0.3
    fan_in: int = 4
    nics: list[str] = field(default_factory=list)
    priority: Literal["roce", "other"] = "roce"
    lossless: bool = True
    # The DSCP the tenant marks (None: the RoCE DSCP in the RoCE priority, best effort in the
    # other). ``priority`` is the queue the switch's DSCP map puts it in: ``priority: roce``
    # with another DSCP is a foreign tenant in the RoCE queue (the backup-job case).
    dscp: int | None = None

    @property
    def marked_dscp(self) -> int:
        if self.dscp is not None:
            return self.dscp
        return ROCE_DSCP if self.priority == "roce" else BEST_EFFORT_DSCP

    def __post_init__(self) -> None:
        check_finite(self)
        if self.dscp is not None and not 0 <= self.dscp <= 63:
            raise ValueError(f"Background.dscp is a 6-bit DSCP in [0, 63], got {self.dscp}")
        if self.pattern not in ("incast", "permutation"):
            raise ValueError(f"Background.pattern: unknown pattern {self.pattern!r}")
        if not 0.0 < self.load <= 1.0:
            raise ValueError(f"Background.load must be in (0, 1], got {self.load}")
        if self.priority not in ("roce", "other"):
            raise ValueError(f"Background.priority: unknown priority {self.priority!r}")
        if self.fan_in < 1:
            raise ValueError("Background.fan_in must be >= 1")


@dataclass
class Probes:
    """``pairs`` random (src, dst) pairs among ``nics`` (empty = all), one probe each every
    ``interval_us``, on the RoCE priority.

    ``until`` is what a sample measures: ``"arrival"``, the probe's one-way delay to its
    receiver (what ``ib_write_lat``'s half round trip estimates where both directions are
    loaded alike); ``"ack"``, until the receiver's ACK is back at the sender, as a
    packet-level simulator's flow completion time of a one-packet flow (HPCC ns-3 completes a
    QP when the ACK of its last byte arrives: ``RdmaHw::ReceiveAck`` -> ``QpComplete``). The
    ACK leaves the receiver's NIC from a strict-priority queue, ahead of its data QPs
    (``ReceiveUdp`` -> ``RdmaEnqueueHighPrioQ``), and waits in the switches' data queues on
    the reverse path."""

    pairs: int = 4
    interval_us: float = 50.0
    size_bytes: int = 64
    nics: list[str] = field(default_factory=list)
    until: str = "arrival"

    def __post_init__(self) -> None:
        check_finite(self)
        if self.pairs < 1 or self.interval_us <= 0 or self.size_bytes < 1:
            raise ValueError("Probes: pairs >= 1, interval_us > 0 and size_bytes >= 1 needed")
        if self.until not in ("arrival", "ack"):
            raise ValueError(f"Probes.until: {self.until!r} is not 'arrival' or 'ack'")


@dataclass
class Workload:
    """Concurrent parts of one run."""

    collectives: list[Collective] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)
    probes: Probes | None = None
