"""Live and post-hoc judgement of a measurement against the safety limits.

``counter_violations`` is the pure core: given counter deltas and how long the traffic ran, which
limits are crossed. ``LiveMonitor`` feeds it cumulative counters while a measurement runs (the
backend calls ``poll`` every ``interval_s``) and raises ``SafetyAbort`` on the first crossing;
``judge`` applies the same rules, plus the bus-bandwidth floor, to a finished measurement.

For the simulated backend "elapsed" is simulated time, so pause fractions are physical.
"""

from __future__ import annotations

import re
import time

from objectives.measurement import Counters, Measurement
from safety.limits import SafetyLimits, Violation
from tuner.errors import SafetyAbort

_PAUSE_DURATION = re.compile(r"^(rx|tx)_prio(\d)_pause_duration$")
_PAUSE_FRAMES = re.compile(r"^(rx|tx)_prio(\d)_pause$|^pfc(\d)_(rx|tx)_pkts$")


def counter_violations(
    delta: Counters, elapsed_s: float, limits: SafetyLimits, *, absolute: Counters | None = None
) -> list[Violation]:
    """Limits crossed by counter deltas over ``elapsed_s`` (``absolute`` holds level counters)."""
    out: list[Violation] = []
    prio = limits.roce_priority
    elapsed_us = max(elapsed_s, 1e-9) * 1e6
    for port, row in sorted(delta.ports.items()):
        worst_fraction = max(
            (v / elapsed_us for k, v in row.items() if _PAUSE_DURATION.match(k)), default=0.0)
        if worst_fraction > limits.max_pause_fraction:
            out.append(Violation(code="pfc_storm", target=port,
                                 detail=f"paused {worst_fraction:.1%} of the time "
                                        f"(limit {limits.max_pause_fraction:.1%})"))
        elif elapsed_s >= 0.1:  # frame rates over very short windows are meaningless
            worst_rate = max(
                (v / elapsed_s for k, v in row.items() if _PAUSE_FRAMES.match(k)), default=0.0)
            if worst_rate > limits.max_pause_frames_per_s:
                out.append(Violation(code="pfc_storm", target=port,
                                     detail=f"{worst_rate:.0f} pause frames/s "
                                            f"(limit {limits.max_pause_frames_per_s:g})"))
        drops = row.get(f"rx_prio{prio}_discards", 0) + row.get(f"queue{prio}_drop_pkts", 0)
        if drops > limits.max_lossless_drops:
            out.append(Violation(code="lossless_drops", target=port,
                                 detail=f"{drops} packets dropped on lossless priority {prio}"))
        crc = row.get("rx_crc_errors_phy", 0) + row.get("rx_crc_errors", 0)
        if crc > limits.max_crc_errors:
            out.append(Violation(code="crc_errors", target=port, detail=f"{crc} CRC errors"))
    for port, row in sorted((absolute or delta).ports.items()):
        if row.get(f"pfcwd{prio}_storm_detected", 0) > 0:
            out.append(Violation(code="pfc_watchdog", target=port,
                                 detail=f"PFC watchdog detected a storm on priority {prio}"))
        if row.get("link_up", 1) == 0:
            out.append(Violation(code="link_down", target=port, detail="link went down"))
    return out


class LiveMonitor:
    """Implements ``tuner.cluster.base.Monitor``: abort a trial while it runs.

    The first ``poll`` (or ``start``) fixes the reference counters. ``tripped_at`` is the
    monotonic time of detection, so the loop can log detection-to-restore time.
    """

    def __init__(self, limits: SafetyLimits) -> None:
        self.limits = limits
        self.interval_s = limits.poll_interval_s
        self._base: Counters | None = None
        self.tripped_at: float | None = None
        self.polls = 0

    def start(self, counters: Counters) -> None:
        self._base = counters

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.polls += 1
        if self._base is None:
            self._base = counters
            return
        found = counter_violations(counters.delta(self._base), elapsed_s, self.limits,
                                   absolute=counters)
        if elapsed_s > self.limits.measurement_timeout_s:
            found.append(Violation(code="timeout",
                                   detail=f"measurement ran {elapsed_s:.1f} s "
                                          f"(limit {self.limits.measurement_timeout_s:g} s)"))
        if found:
            self.tripped_at = time.monotonic()
            first = found[0]
            raise SafetyAbort(first.code, "; ".join(str(v) for v in found))


def busbw_violations(
    measurement: Measurement, baseline: Measurement | None, limits: SafetyLimits
) -> list[Violation]:
    """Collectives whose bus bandwidth fell below ``min_busbw_ratio`` of the baseline's."""
    if baseline is None:
        return []
    base = {(c.name, c.size_bytes): c.busbw_gbytes_per_s for c in baseline.collectives}
    out = []
    for c in measurement.collectives:
        ref = base.get((c.name, c.size_bytes))
        if ref and c.busbw_gbytes_per_s < limits.min_busbw_ratio * ref:
            out.append(Violation(
                code="busbw_floor", target=f"{c.name}:{c.size_bytes}",
                detail=f"busbw {c.busbw_gbytes_per_s:.2f} GB/s below "
                       f"{limits.min_busbw_ratio:.0%} of the baseline's {ref:.2f} GB/s"))
    return out


def judge(
    measurement: Measurement, limits: SafetyLimits, baseline: Measurement | None = None
) -> list[Violation]:
    """Every limit a finished measurement crossed."""
    found = counter_violations(measurement.counters, measurement.duration_s, limits,
                               absolute=measurement.counters_after)
    return found + busbw_violations(measurement, baseline, limits)
