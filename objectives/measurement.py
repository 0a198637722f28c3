"""What a trial measures, as immutable data.

Counter names are the real device names: mlx5 ``ethtool -S`` and ``hw_counters`` names for NIC
ports (``rx_prio3_pause``, ``rx_prio3_pause_duration``, ``rx_prio3_pause_transition``,
``np_cnp_sent``, ``np_ecn_marked_roce_packets``, ``rp_cnp_handled``, ``rx_prio3_discards`` ...),
and for switch ports the SONiC/SAI meaning in a platform-neutral spelling (``pfc3_rx_pkts``,
``pfc3_tx_pkts``, ``queue3_ecn_marked_pkts``, ``queue3_wred_drop_pkts``, ``queue3_drop_pkts``,
``queue3_watermark_bytes``, ``pfcwd3_storm_detected``). A counter a device does not expose is
absent from its mapping, never zero: per-priority pause counters only exist where PFC is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

from objectives.counters import delta_row

_FROZEN = ConfigDict(frozen=True, extra="forbid")


Rows = dict[str, dict[str, int]]  # {port: {counter: value}}


def timed(read: Callable[[], Rows]) -> tuple[Rows, float]:
    """One target's counters and when they were taken: the midpoint of the read, since the
    device snapshots them somewhere between the command's start and its end."""
    start = time.monotonic()
    rows = read()
    return rows, (start + time.monotonic()) / 2


class Counters(BaseModel):
    """Cumulative counters per port: ``{"host0/mlx5_0": {"rx_prio3_pause": 12, ...}}``.

    Keys are ``<target>/<port>`` for switches (``leaf0/Ethernet8``) and the NIC target name for
    NICs. ``taken_at_s`` is the monotonic time of the read, so rates can be computed.
    """

    model_config = _FROZEN
    ports: dict[str, dict[str, int]] = Field(default_factory=dict)
    taken_at_s: float = 0.0
    # Where targets are read one by one or in parallel (SSH), each port's own read time: the
    # midpoint of its target's command. A rate over a short interval divides by the port's own
    # interval, not by the whole fan-out's, whose end a slow target sets. In a delta, both
    # ``taken_at_s`` and these are durations.
    port_taken_at_s: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def gather(cls, reads: Iterable[tuple[Rows, float]]) -> Counters:
        """One reading of many targets from ``(rows, read_at_s)`` per target (see ``timed``)."""
        ports: dict[str, dict[str, int]] = {}
        at: dict[str, float] = {}
        for rows, read_at in reads:
            ports.update(rows)
            at.update(dict.fromkeys(rows, read_at))
        return cls(ports=ports, taken_at_s=time.monotonic(), port_taken_at_s=at)

    def at(self, port: str) -> float:
        """When ``port`` was read (or, in a delta, over how long): its own time, else the set's."""
        return self.port_taken_at_s.get(port, self.taken_at_s)

    def delta(self, before: Counters) -> Counters:
        """``self - before`` per port and counter, by the meanings in ``objectives.counters``.

        A port or counter absent from ``before`` counts from zero (never silently dropped); a
        counter that went backwards (cleared or wrapped) yields its ``after`` value, the way
        ``pfcstat -c`` users read a cleared counter; levels and flags keep ``after``.
        """
        out = {port: delta_row(before.ports.get(port, {}), after)
               for port, after in self.ports.items()}
        timed = self.port_taken_at_s or before.port_taken_at_s
        return Counters(ports=out, taken_at_s=self.taken_at_s - before.taken_at_s,
                        port_taken_at_s={p: self.at(p) - before.at(p) for p in out} if timed
                        else {})

    def total(self, name: str) -> int:
        """Sum of one counter over every port that has it."""
        return sum(row[name] for row in self.ports.values() if name in row)

    def missing(self, name: str) -> list[str]:
        """Ports that do not expose ``name`` (absent, which is not zero)."""
        return sorted(p for p, row in self.ports.items() if name not in row)


class CollectiveResult(BaseModel):
    """One collective at one message size, in nccl-tests terms (GB/s = 1e9 bytes per second)."""

    model_config = _FROZEN
    name: str  # nccl-tests op name: all_reduce, alltoall, all_gather, reduce_scatter
    size_bytes: int
    ranks: int
    time_us: float  # mean per iteration
    algbw_gbytes_per_s: float
    busbw_gbytes_per_s: float
    iteration_times_us: list[float] = Field(default_factory=list)
    wrong: int = 0
    weight: float = 1.0
    line_rate_gbytes_per_s: float = 0.0  # the NIC bound busbw is compared with (0 = unknown)


class LatencyResult(BaseModel):
    """Latency-under-load probe statistics (perftest ``ib_write_lat`` or rocesim probes)."""

    model_config = _FROZEN
    count: int
    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    mean_us: float = 0.0


class TenantResult(BaseModel):
    """A declared background tenant (storage, backup) that shares the fabric: its goodput over
    the measurement, so a trial that starves it can be priced or refused."""

    model_config = _FROZEN
    name: str  # "background<i>", the i-th background part of the workload
    priority: str  # "roce" (shares the lossless class) or "other"
    goodput_gbps: float
    offered_gbps: float = 0.0


class Measurement(BaseModel):
    """Everything one trial measured; the raw tool outputs ride along for the audit trail."""

    model_config = _FROZEN
    collectives: list[CollectiveResult] = Field(default_factory=list)
    latency: LatencyResult | None = None
    tenants: list[TenantResult] = Field(default_factory=list)
    counters_before: Counters = Field(default_factory=Counters)
    counters_after: Counters = Field(default_factory=Counters)
    duration_s: float = 0.0
    raw: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    extra: dict[str, float] = Field(default_factory=dict)  # backend-specific scalars
    replicate: int = 0  # which paired replicate (same placement and seed across trials)
    # (elapsed s, {port: cumulative pause µs}) at each live-monitor poll: the storm rule's input
    pause_series: list[tuple[float, dict[str, int]]] = Field(default_factory=list)

    @property
    def counters(self) -> Counters:
        """Counter deltas over the measurement."""
        return self.counters_after.delta(self.counters_before)
