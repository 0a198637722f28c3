"""The confirmation's verdict (objectives/verdict.py): per-metric effects in their own units,
guardrails per placement, corrected intervals, and the price of fixing what the baseline breaks.
Numbers are hand-computed from the synthetic measurements below."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from objectives.measurement import (
    CollectiveResult,
    Counters,
    LatencyResult,
    Measurement,
    TenantResult,
)
from objectives.score import Guardrails, ScoreConfig
from objectives.verdict import judge, winner_line, winner_of

CFG = ScoreConfig()  # primary busbw, the default guardrails


def _m(busbw: float, p99: float, pause_us: int, replicate: int,
       tenant: float | None = None) -> Measurement:
    """One measurement of 0.01 s: one collective, one probe p99, one NIC port's pause."""
    coll = CollectiveResult(name="alltoall", size_bytes=1 << 20, ranks=4, time_us=100.0,
                            algbw_gbytes_per_s=busbw, busbw_gbytes_per_s=busbw, weight=1.0,
                            line_rate_gbytes_per_s=12.5)
    port = "host0/mlx5_0"
    return Measurement(
        collectives=[coll],
        latency=LatencyResult(count=100, p50_us=p99 / 2, p99_us=p99, p999_us=2 * p99,
                              max_us=3 * p99),
        counters_before=Counters(ports={port: {"rx_prio3_pause_duration": 0}}),
        counters_after=Counters(ports={port: {"rx_prio3_pause_duration": pause_us}}),
        duration_s=0.01, replicate=replicate,
        tenants=[TenantResult(name="storage", priority="roce", goodput_gbps=tenant)]
        if tenant is not None else [])


SEEDS = [1_234_567, 2_345_678, 3_456_789, 4_567_890, 5_678_901]
BASE_BW = [8.0, 9.0, 7.0, 8.5, 7.5]
BASE_P99 = [10.0, 12.0, 9.0, 11.0, 10.0]


def _base(pause_us: int) -> list[Measurement]:
    return [_m(bw, p, pause_us, r) for bw, p, r in zip(BASE_BW, BASE_P99, SEEDS, strict=True)]


def _trade_off() -> list[Measurement]:
    """busbw -15 % [on every placement, with a little spread], p99 +20 %, PFC pause to 0."""
    f = [0.84, 0.86, 0.85, 0.85, 0.85]
    return [_m(bw * x, p * 1.2, 0, r)
            for bw, x, p, r in zip(BASE_BW, f, BASE_P99, SEEDS, strict=True)]


def test_a_trial_that_trades_busbw_for_zero_pfc_does_not_win_when_the_baseline_is_fine() -> None:
    # Baseline pause 5 µs in 0.01 s = 500 µs/s: within the default 1000 µs/s guardrail.
    checks = judge(_base(5), {7: _trade_off()}, {}, CFG)
    (c,) = checks
    assert not c.confirmed and winner_of(checks) is None
    assert c.improvement_percent == pytest.approx(-15.0, abs=0.1)
    assert c.problem == "busbw interval [-15.9, -14.1] % does not lie above 0"
    assert "gives up busbw -15.0 %" in c.price and "probe p99 +20.0 %" in c.price


def test_it_wins_when_the_baseline_breaks_the_pfc_guardrail_and_the_price_is_stated() -> None:
    # Baseline pause 20 µs in 0.01 s = 2000 µs/s = 0.2 % of the time, over 1000 µs/s.
    checks = judge(_base(20), {7: _trade_off()}, {}, CFG)
    (c,) = checks
    assert c.confirmed and winner_of(checks) == 7
    assert c.price.startswith("gives up busbw -15.0 % [")
    assert "brings PFC pause from 0.2 % of the time to 0 %, on every placement, at busbw " \
           "-15.0 % [" in c.price
    line = winner_line(c)
    assert line.startswith("busbw -15.0 % [") and "PFC pause 0.2 % → 0 % of the time" in line
    assert "p99 worst placement 12 → 14.4 µs, median 10 → 12 µs (worse on 5 of 5)" in line


def test_busbw_beyond_its_guardrail_loses_even_when_the_baseline_breaks_pfc() -> None:
    deep = [m.model_copy(update={"collectives": [c.model_copy(update={
        "busbw_gbytes_per_s": c.busbw_gbytes_per_s * 0.9}) for c in m.collectives]})
        for m in _trade_off()]  # -23.5 %: beyond the 20 % allowance on every placement
    (c,) = judge(_base(20), {7: deep}, {}, CFG)
    assert not c.confirmed and c.problem.startswith("guardrail busbw_loss: busbw -2")


def test_a_tenant_beyond_its_allowance_on_one_placement_is_not_confirmed() -> None:
    base = [m.model_copy(update={"tenants": [TenantResult(name="storage", priority="roce",
                                                          goodput_gbps=80.0)]})
            for m in _base(5)]
    good = [_m(bw * 1.3, p, 5, r, tenant=t) for bw, p, r, t in
            zip(BASE_BW, BASE_P99, SEEDS, [78.0, 78.0, 78.0, 78.0, 62.0], strict=True)]
    (c,) = judge(base, {3: good}, {}, CFG)
    assert not c.confirmed
    assert c.problem == ("guardrail tenant_goodput: tenant goodput -22.5 % (allowed -20 %) on "
                         f"placement {SEEDS[4]}")
    assert c.effects["tenant_goodput"]["per_placement"][4] == {
        "replicate": SEEDS[4], "baseline": 80.0, "candidate": 62.0}


def test_a_positive_mean_whose_corrected_interval_straddles_zero_does_not_confirm() -> None:
    """Per-placement busbw gains of +8, +1, +6, +2, +5 %: the plain 95 % t-interval of the mean
    log2 ratio lies above 0, the one corrected for 3 candidates does not."""
    gains = [1.08, 1.01, 1.06, 1.02, 1.05]
    logs = [math.log2(g) for g in gains]
    n, mean = len(logs), sum(logs) / len(logs)
    sd = stats.tstd(logs)
    plain_lo = mean - stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    corr_lo = mean - stats.t.ppf(1 - 0.05 / 6, n - 1) * sd / math.sqrt(n)
    assert plain_lo > 0 > corr_lo  # the data the test is about
    cand = [_m(bw * g, p, 5, r) for bw, g, p, r in zip(BASE_BW, gains, BASE_P99, SEEDS,
                                                       strict=True)]
    flat = [_m(bw, p, 5, r) for bw, p, r in zip(BASE_BW, BASE_P99, SEEDS, strict=True)]
    alone = judge(_base(5), {1: cand}, {}, CFG)
    assert alone[0].confirmed  # judged alone, uncorrected: it would confirm
    three = judge(_base(5), {1: cand, 2: flat, 3: flat}, {}, CFG)
    c = three[0]
    assert c.improvement_percent > 0 and not c.confirmed
    assert c.ci95_low == pytest.approx((2 ** corr_lo - 1) * 100)
    assert winner_of(three) is None


def test_effects_carry_each_metric_in_its_own_unit_per_placement() -> None:
    cand = [_m(bw * 1.25, p * 0.5, 0, r) for bw, p, r in
            zip(BASE_BW, BASE_P99, SEEDS, strict=True)]
    (c,) = judge(_base(10), {4: cand}, {}, CFG)
    assert c.confirmed and c.price == ""  # better on everything: no trade to state
    e = c.effects
    assert e["busbw"]["change_percent"] == pytest.approx(25.0)
    assert e["busbw"]["ci95_low"] == pytest.approx(25.0)  # the same ratio everywhere
    assert e["p99_us"]["change_percent"] == pytest.approx(-50.0)
    assert e["pause_us_per_s"]["baseline_mean"] == pytest.approx(1000.0)
    assert e["pause_us_per_s"]["change_percent"] == pytest.approx(-100.0)
    assert [p["replicate"] for p in e["busbw"]["per_placement"]] == SEEDS
    assert e["busbw"]["per_placement"][0] == {"replicate": SEEDS[0], "baseline": 8.0,
                                              "candidate": 10.0}
    assert e["tenant_goodput"]["change_percent"] is None  # no tenant in this workload


def test_a_safety_stop_or_too_few_pairs_never_confirms() -> None:
    cand = [_m(bw * 1.5, p, 0, r) for bw, p, r in zip(BASE_BW, BASE_P99, SEEDS, strict=True)]
    stopped = judge(_base(5), {1: cand[:2]}, {1: "rolled_back:pfc_storm"}, CFG)
    assert not stopped[0].confirmed and stopped[0].problem == "rolled_back:pfc_storm"
    one = judge(_base(5), {1: cand[:1]}, {}, CFG)
    assert not one[0].confirmed and "fewer than 2" in one[0].problem


def test_p99_guardrail_allows_the_target_or_the_baseline_plus_its_allowance() -> None:
    g = Guardrails(p99_target_us=20.0, p99_allowance_percent=25.0)
    cfg = ScoreConfig(guardrails=g)
    # placement 0: 10 -> 19 µs, within the 20 µs target; placement 1: 40 -> 49 µs, within
    # 40 * 1.25 = 50; both fine. 40 -> 51 µs breaks it.
    base = [_m(8.0, 10.0, 0, 1), _m(8.0, 40.0, 0, 2), _m(8.0, 10.0, 0, 3), _m(8.0, 10.0, 0, 4),
            _m(8.0, 10.0, 0, 5)]
    ok = [_m(9.0, 19.0, 0, 1), _m(9.0, 49.0, 0, 2), *[_m(9.0, 10.0, 0, r) for r in (3, 4, 5)]]
    bad = [_m(9.0, 19.0, 0, 1), _m(9.0, 51.0, 0, 2), *[_m(9.0, 10.0, 0, r) for r in (3, 4, 5)]]
    assert judge(base, {1: ok}, {}, cfg)[0].confirmed
    c = judge(base, {1: bad}, {}, cfg)[0]
    assert not c.confirmed and c.problem.startswith("guardrail p99: probe p99 40 -> 51 µs")
