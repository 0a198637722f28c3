"""The traffic mix: collectives, background flows and latency probes, and how they become flows.

Collectives (NCCL-like, one QP per channel and connection, each with its own UDP source port):

* ring AllReduce: every rank sends 2(n-1)/n x S to its ring successor, pipelined; a rank can
  run at most one S/n chunk ahead of what it received from its predecessor, so the slowest
  ring edge paces the whole ring (as in NCCL);
* AllGather / ReduceScatter: the same ring with (n-1)/n x S per rank;
* AlltoAll: every rank sends S/n to every other rank at once (no dependency), over
  ``qps_per_connection`` QPs per peer pair (``channels`` applies to rings only).

Iterations run back to back; QP (DCQCN) state persists across iterations, as on real NICs.
Background flows are open-ended and capped at ``load`` x line rate; in the RoCE priority they
obey DCQCN, in the ``other`` class they do not react to ECN (lossless on priority 4 or lossy).
Probes are 64-byte messages between random pairs, timed through the queues they meet.
Not modelled: NCCL tree algorithms, NVLink/PCIe inside a host, GPU compute time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

OPS = ("all_reduce", "alltoall", "all_gather", "reduce_scatter")

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

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"Collective.op: unknown op {self.op!r}; expected one of {OPS}")
        if self.size_bytes <= 0:
            raise ValueError(f"Collective.size_bytes must be > 0, got {self.size_bytes}")
        if len(self.ranks) < 2 or len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"Collective {self.label}: needs >= 2 distinct ranks")
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

    def __post_init__(self) -> None:
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
    ``interval_us``, on the RoCE priority."""

    pairs: int = 4
    interval_us: float = 50.0
    size_bytes: int = 64
    nics: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pairs < 1 or self.interval_us <= 0 or self.size_bytes < 1:
            raise ValueError("Probes: pairs >= 1, interval_us > 0 and size_bytes >= 1 needed")


@dataclass
class Workload:
    """Concurrent parts of one run."""

    collectives: list[Collective] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)
    probes: Probes | None = None
