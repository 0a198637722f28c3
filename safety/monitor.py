"""Live and post-hoc judgement of a measurement against the safety limits.

``counter_violations`` is the pure core for counts (drops, CRC errors, PFC watchdog storms,
pause-frame rates, links); ``storm_violations`` the one for sustained pausing. ``LiveMonitor``
feeds both with cumulative counters while a measurement runs (the backend calls ``poll`` every
``interval_s``) and raises ``SafetyAbort`` on the first crossing; ``judge`` applies the same
rules, plus the paired constraints, to a finished measurement.

A PFC storm is judged the way a switch's PFC watchdog judges one: a port that stays paused for a
whole detection window (SONiC pfcwd: 200 ms by default, "detection_time"), not a port that paused
during the first milliseconds of an incast. The window slides over the monitor's samples and only
whole windows count, so the start-up burst of every incast and AlltoAll -- which is real and is
priced by the score's PFC term -- never rolls a trial back by itself. The live and the post-hoc
rule are one function over the same samples (``Measurement.pause_series``).

For the simulated backend "elapsed" is simulated time, so pause fractions are physical.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from objectives.measurement import Counters, Measurement
from safety.limits import SafetyLimits, Violation, describe
from tuner.errors import SafetyAbort

_PAUSE_DURATION = re.compile(r"^(rx|tx)_prio(\d)_pause_duration$")
_PAUSE_FRAMES = re.compile(r"^(rx|tx)_prio(\d)_pause$|^pfc(\d)_(rx|tx)_pkts$")

SONIC_PFCWD_DETECTION_S = 0.2  # sonic-utilities pfcwd default detection_time, 200 ms
PauseSample = tuple[float, dict[str, int]]  # (elapsed s, {"<port> <counter>": cumulative µs})


def storm_window_s(limits: SafetyLimits, measurement_s: float | None) -> float:
    """The storm detection window: the experiment's, or the watchdog's 200 ms scaled down to
    half a measurement (the baseline's length) when that is shorter.

    Half, because the start-up transient of an incast lasts a few milliseconds of a ~10 ms
    simulated measurement: measured on experiments/quick.yaml, settings whose collectives
    finished paused 28-45 % of a half-measurement window, settings that stalled them until the
    time cap 73-80 %; over a quarter-measurement window both read 83-86 %.
    """
    if limits.storm_window_s is not None:
        return limits.storm_window_s
    if measurement_s is None or measurement_s <= 0:
        return SONIC_PFCWD_DETECTION_S
    return min(SONIC_PFCWD_DETECTION_S, measurement_s / 2)


def pause_sample(counters: Counters, elapsed_s: float) -> PauseSample:
    """The pause-duration counters of one poll, as the storm rule reads them."""
    return (elapsed_s, {f"{port} {name}": v for port, row in counters.ports.items()
                        for name, v in row.items() if _PAUSE_DURATION.match(name)})


def storm_violations(series: Sequence[PauseSample], window_s: float,
                     max_fraction: float) -> list[Violation]:
    """Ports paused more than ``max_fraction`` of some whole window of ``window_s`` seconds.

    ``series`` holds cumulative pause µs per port counter at increasing times. For every sample
    the window ends at, it starts at the latest sample at least ``window_s`` earlier; windows
    shorter than ``window_s`` (the start of a measurement) are never judged.
    """
    worst: dict[str, float] = {}
    start = 0
    for j in range(1, len(series)):
        tj, pj = series[j]
        while start + 1 < j and series[start + 1][0] <= tj - window_s:
            start += 1
        ti, pi = series[start]
        span_us = (tj - ti) * 1e6
        if tj - ti < window_s * (1 - 1e-9) or span_us <= 0:
            continue
        for key, v in pj.items():
            frac = (v - pi.get(key, 0)) / span_us
            if frac > worst.get(key, 0.0):
                worst[key] = frac
    out = []
    by_port: dict[str, float] = {}
    for key, frac in worst.items():
        port = key.split(" ", 1)[0]
        by_port[port] = max(by_port.get(port, 0.0), frac)
    for port, frac in sorted(by_port.items()):
        if frac > max_fraction:
            out.append(Violation(code="pfc_storm", target=port,
                                 detail=f"paused {min(frac, 1.0):.1%} of a {window_s * 1e3:g} ms "
                                        f"window (limit {max_fraction:.1%})"))
    return out


def counter_violations(
    delta: Counters, elapsed_s: float, limits: SafetyLimits, *, absolute: Counters | None = None,
    poll_s: dict[str, float] | None = None
) -> list[Violation]:
    """Limits crossed by counter deltas over ``elapsed_s`` (``absolute`` holds flags).

    ``poll_s`` gives the switch's counter poll interval per family (SONiC ``counterpoll``:
    ``pfc``, ``queue``): a switch frame rate over less than one interval would read a whole
    interval's frames as if they came at once, so it is not judged yet (the final counters are
    read one interval after the traffic, ``SshCluster.settled``).
    """
    out: list[Violation] = []
    prio = limits.roce_priority
    switch_min = max(0.1, (poll_s or {}).get("pfc", 0.0))
    for port, row in sorted(delta.ports.items()):
        rated = [(k, v) for k, v in row.items() if _PAUSE_FRAMES.match(k)
                 and elapsed_s >= (switch_min if k.startswith("pfc") else 0.1)]
        if rated:  # frame rates over very short windows are meaningless
            worst_rate = max(v / elapsed_s for _, v in rated)
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
        # A cumulative count (objectives.counters): a storm before the study is not this one.
        if row.get(f"pfcwd{prio}_storm_detected", 0) > 0:
            out.append(Violation(code="pfc_watchdog", target=port,
                                 detail=f"PFC watchdog detected a storm on priority {prio}"))
    for port, row in sorted((absolute or delta).ports.items()):
        if row.get("link_up", 1) == 0:
            out.append(Violation(code="link_down", target=port, detail="link went down"))
    return out


class LiveMonitor:
    """Implements ``tuner.cluster.base.Monitor``: abort a trial while it runs.

    The first ``poll`` (or ``start``) fixes the reference counters. ``series`` keeps the pause
    samples for the post-hoc rule and the record; ``tripped_at`` is the monotonic time of
    detection, so the loop can log detection-to-restore time. ``abort=False`` only records
    (the baseline measurement: the canary as it is is not rolled back).
    """

    def __init__(self, limits: SafetyLimits, window_s: float | None = None, *,
                 abort: bool = True, poll_s: dict[str, float] | None = None) -> None:
        self.limits = limits
        self.poll_s = dict(poll_s or {})
        self.interval_s = limits.poll_interval_s
        self.window_s = window_s if window_s is not None else storm_window_s(limits, None)
        self.abort = abort
        self._base: Counters | None = None
        self.series: list[PauseSample] = []
        self.tripped_at: float | None = None
        self.polls = 0

    def start(self, counters: Counters) -> None:
        self._base = counters
        self.series = [pause_sample(counters.delta(counters), 0.0)]

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.polls += 1
        if self._base is None:
            self.start(counters)
            return
        delta = counters.delta(self._base)
        self.series.append(pause_sample(delta, elapsed_s))
        if not self.abort:
            return
        found = storm_violations(self.series, self.window_s, self.limits.max_pause_fraction)
        found += counter_violations(delta, elapsed_s, self.limits, absolute=counters,
                                    poll_s=self.poll_s)
        if elapsed_s > self.limits.measurement_timeout_s:
            found.append(Violation(code="timeout",
                                   detail=f"measurement ran {elapsed_s:.1f} s "
                                          f"(limit {self.limits.measurement_timeout_s:g} s)"))
        if found:
            self.tripped_at = time.monotonic()
            first = found[0]
            raise SafetyAbort(first.code, describe(found))


def judge(measurement: Measurement, limits: SafetyLimits, window_s: float) -> list[Violation]:
    """Every safety limit a finished measurement crossed (the live rules, post hoc).

    Without monitor samples the whole measurement is one window, judged only when it is at
    least ``window_s`` long.
    """
    series = measurement.pause_series
    if len(series) < 2:
        delta = measurement.counters
        series = [pause_sample(Counters(), 0.0),
                  pause_sample(delta, measurement.duration_s)]
    found = storm_violations(series, window_s, limits.max_pause_fraction)
    return found + counter_violations(measurement.counters, measurement.duration_s, limits,
                                      absolute=measurement.counters_after)
