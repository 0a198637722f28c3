"""Live monitor and post-hoc judge on counter deltas (mlx5 counter names from en_stats.c).

The storm rule follows the PFC watchdog: SONiC's pfcwd declares a storm when a queue stays
paused for its whole detection time (sonic-utilities ``pfcwd start``: detection_time default
200 ms), so a window must be paused, as a whole, beyond ``max_pause_fraction``.
"""

from __future__ import annotations

import pytest

from objectives.measurement import Counters, Measurement
from safety.limits import SafetyLimits
from safety.monitor import (
    LiveMonitor,
    counter_violations,
    judge,
    pause_sample,
    storm_violations,
    storm_window_s,
)
from tuner.errors import SafetyAbort

LIMITS = SafetyLimits(max_pause_fraction=0.5, max_pause_frames_per_s=1000,
                      storm_window_s=0.2)


def c(**rows: dict[str, int]) -> Counters:
    return Counters(ports={k.replace("__", "/"): v for k, v in rows.items()})


def _series(paused_us_per_step: list[int], step_s: float = 0.05) -> list[tuple[float, dict]]:
    """Cumulative rx pause µs of one port after each ``step_s`` poll."""
    out, total = [(0.0, {"h0 rx_prio3_pause_duration": 0})], 0
    for i, p in enumerate(paused_us_per_step, 1):
        total += p
        out.append((i * step_s, {"h0 rx_prio3_pause_duration": total}))
    return out


def test_a_burst_that_clears_within_the_window_is_not_a_storm() -> None:
    # 50 ms fully paused (the start-up burst), then quiet: 25 % of any 200 ms window.
    series = _series([50_000, 0, 0, 0, 0, 0, 0, 0])
    assert storm_violations(series, 0.2, 0.5) == []
    # The old rule (pause over the time since the start) called this a storm at the first poll.
    assert 50_000 / 50_000 > 0.5


def test_sustained_pausing_over_a_whole_window_is_a_storm() -> None:
    series = _series([40_000] * 8)  # 80 % of every window
    (v,) = storm_violations(series, 0.2, 0.5)
    assert (v.code, v.target) == ("pfc_storm", "h0") and "80.0%" in v.detail


def test_windows_shorter_than_the_window_are_never_judged() -> None:
    # 100 % paused but only 150 ms observed: not a whole window yet.
    assert storm_violations(_series([50_000] * 3), 0.2, 0.5) == []
    assert storm_violations(_series([50_000] * 4), 0.2, 0.5) != []


def test_window_scales_down_to_half_the_measurement() -> None:
    auto = SafetyLimits()
    assert storm_window_s(auto, None) == 0.2  # the watchdog's detection time
    assert storm_window_s(auto, 10.0) == 0.2
    assert storm_window_s(auto, 0.01) == pytest.approx(0.005)
    assert storm_window_s(LIMITS, 0.01) == 0.2  # an explicit window wins


def test_pause_frame_rate() -> None:
    found = counter_violations(c(leaf0__Ethernet0={"pfc3_tx_pkts": 2000}), 1.0, LIMITS)
    assert [v.code for v in found] == ["pfc_storm"]
    assert counter_violations(c(leaf0__Ethernet0={"pfc3_tx_pkts": 999}), 1.0, LIMITS) == []


def test_drops_crc_watchdog_and_link() -> None:
    found = counter_violations(
        c(h0={"rx_prio3_discards": 1, "rx_crc_errors_phy": 2},
          leaf0__Ethernet0={"pfcwd3_storm_detected": 1, "link_up": 0}), 1.0, LIMITS)
    assert sorted(v.code for v in found) == ["crc_errors", "link_down", "lossless_drops",
                                             "pfc_watchdog"]


def test_a_watchdog_storm_before_the_trial_does_not_count() -> None:
    # pfcwd STORM DETECTED is a cumulative count (show pfcwd stats): judge its delta.
    before = c(leaf0__Ethernet0={"pfcwd3_storm_detected": 3})
    mon = LiveMonitor(LIMITS)
    mon.poll(before, 0.0)
    mon.poll(c(leaf0__Ethernet0={"pfcwd3_storm_detected": 3}), 0.1)  # no abort
    with pytest.raises(SafetyAbort, match="pfc_watchdog"):
        mon.poll(c(leaf0__Ethernet0={"pfcwd3_storm_detected": 4}), 0.2)


def test_live_monitor_first_poll_is_the_reference_and_judges_whole_windows() -> None:
    mon = LiveMonitor(LIMITS, 0.2)
    mon.poll(c(h0={"rx_prio3_pause_duration": 10_000_000}), 0.0)  # old pauses don't count
    mon.poll(c(h0={"rx_prio3_pause_duration": 10_100_000}), 0.1)  # 100 % but half a window
    mon.poll(c(h0={"rx_prio3_pause_duration": 10_100_000}), 0.2)  # 50 %: not above
    with pytest.raises(SafetyAbort) as err:
        mon.poll(c(h0={"rx_prio3_pause_duration": 10_250_000}), 0.3)
    assert err.value.reason == "pfc_storm"
    assert mon.tripped_at is not None
    assert [t for t, _ in mon.series] == [0.0, 0.1, 0.2, 0.3]


def test_recording_monitor_never_aborts() -> None:
    mon = LiveMonitor(LIMITS, 0.2, abort=False)
    for i in range(5):
        mon.poll(c(h0={"rx_prio3_pause_duration": i * 100_000}), i * 0.1)
    assert len(mon.series) == 5


def test_live_monitor_timeout() -> None:
    mon = LiveMonitor(SafetyLimits(measurement_timeout_s=5))
    mon.poll(c(h0={}), 0.0)
    with pytest.raises(SafetyAbort, match="timeout"):
        mon.poll(c(h0={}), 5.5)


def test_judge_uses_the_same_rule_on_the_samples() -> None:
    burst = Measurement(counters_before=c(h0={"rx_prio3_pause_duration": 0}),
                        counters_after=c(h0={"rx_prio3_pause_duration": 50_000}),
                        duration_s=0.4, pause_series=_series([50_000] + [0] * 7))
    assert judge(burst, LIMITS, 0.2) == []
    storm = burst.model_copy(update={"pause_series": _series([40_000] * 8),
                                     "counters_after": c(h0={"rx_prio3_pause_duration": 320_000})})
    assert [v.code for v in judge(storm, LIMITS, 0.2)] == ["pfc_storm"]


def test_judge_without_samples_treats_the_measurement_as_one_window() -> None:
    m = Measurement(counters_before=c(h0={"rx_prio3_pause_duration": 0}),
                    counters_after=c(h0={"rx_prio3_pause_duration": 300_000}), duration_s=0.5)
    assert [v.code for v in judge(m, LIMITS, 0.2)] == ["pfc_storm"]  # 60 % of 0.5 s
    short = m.model_copy(update={"duration_s": 0.1, "counters_after":
                                 c(h0={"rx_prio3_pause_duration": 90_000})})
    assert judge(short, LIMITS, 0.2) == []  # shorter than one window


def test_pause_sample_keeps_only_pause_durations() -> None:
    t, s = pause_sample(c(h0={"rx_prio3_pause_duration": 5, "rx_prio3_pause": 9}), 1.5)
    assert t == 1.5 and s == {"h0 rx_prio3_pause_duration": 5}


def test_switch_frame_rates_wait_for_one_counter_poll_interval() -> None:
    # SONiC updates PFC counters once per poll interval (counterpoll show): 2000 frames seen
    # 0.5 s in may be a whole second's worth. Judged once a whole interval has passed.
    burst = c(leaf0__Ethernet0={"pfc3_tx_pkts": 2000})
    assert counter_violations(burst, 0.5, LIMITS, poll_s={"pfc": 1.0}) == []
    assert [v.code for v in counter_violations(burst, 0.5, LIMITS)] == ["pfc_storm"]
    assert [v.code for v in counter_violations(burst, 1.0, LIMITS, poll_s={"pfc": 1.0})] == [
        "pfc_storm"]
    # the NIC's own counters are read live: not delayed
    nic = c(h0={"rx_prio3_pause": 2000})
    assert [v.code for v in counter_violations(nic, 0.5, LIMITS, poll_s={"pfc": 1.0})] == [
        "pfc_storm"]
