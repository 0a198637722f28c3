"""Live monitor and post-hoc judge on counter deltas (mlx5 counter names from en_stats.c)."""

from __future__ import annotations

import pytest

from objectives.measurement import CollectiveResult, Counters, Measurement
from safety.limits import SafetyLimits
from safety.monitor import LiveMonitor, counter_violations, judge
from tuner.errors import SafetyAbort

LIMITS = SafetyLimits(max_pause_fraction=0.05, max_pause_frames_per_s=1000)


def c(**rows: dict[str, int]) -> Counters:
    return Counters(ports={k.replace("__", "/"): v for k, v in rows.items()})


def test_pause_fraction_over_limit_is_a_storm() -> None:
    # 60 ms paused in 1 s = 6 % > 5 %.
    found = counter_violations(c(h0={"rx_prio3_pause_duration": 60_000}), 1.0, LIMITS)
    assert [(v.code, v.target) for v in found] == [("pfc_storm", "h0")]
    assert counter_violations(c(h0={"rx_prio3_pause_duration": 40_000}), 1.0, LIMITS) == []


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


def test_live_monitor_first_poll_is_the_reference() -> None:
    mon = LiveMonitor(LIMITS)
    mon.poll(c(h0={"rx_prio3_pause_duration": 10_000_000}), 0.0)  # old pauses don't count
    mon.poll(c(h0={"rx_prio3_pause_duration": 10_010_000}), 1.0)
    with pytest.raises(SafetyAbort) as err:
        mon.poll(c(h0={"rx_prio3_pause_duration": 10_200_000}), 2.0)
    assert err.value.reason == "pfc_storm"
    assert mon.tripped_at is not None


def test_live_monitor_timeout() -> None:
    mon = LiveMonitor(SafetyLimits(measurement_timeout_s=5))
    mon.poll(c(h0={}), 0.0)
    with pytest.raises(SafetyAbort, match="timeout"):
        mon.poll(c(h0={}), 5.5)


def _m(busbw: float) -> Measurement:
    return Measurement(
        collectives=[CollectiveResult(name="all_reduce", size_bytes=1 << 20, ranks=8, time_us=1,
                                      algbw_gbytes_per_s=busbw, busbw_gbytes_per_s=busbw)],
        counters_before=c(h0={"rx_prio3_discards": 5}),
        counters_after=c(h0={"rx_prio3_discards": 5}), duration_s=1.0)


def test_judge_busbw_floor_against_baseline() -> None:
    base = _m(10.0)
    assert judge(_m(3.1), LIMITS, base) == []
    (v,) = judge(_m(2.9), LIMITS, base)
    assert v.code == "busbw_floor" and "2.90 GB/s" in v.detail
