"""Scoring formulas (objectives/score.py docstring) pinned with hand-computed numbers, and the
property the score exists for: a trial that halves bus bandwidth never beats the baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objectives.measurement import (
    CollectiveResult,
    Counters,
    LatencyResult,
    Measurement,
    TenantResult,
)
from objectives.score import (
    Guardrails,
    ScoreConfig,
    busbw_norm,
    check_weights,
    log2_percent,
    pareto_front,
    pause_us_per_s,
    score,
    t_interval,
)


def _coll(name: str, busbw: float, weight: float, line: float = 12.5) -> CollectiveResult:
    return CollectiveResult(
        name=name,
        size_bytes=1 << 20,
        ranks=4,
        time_us=100.0,
        algbw_gbytes_per_s=busbw,
        busbw_gbytes_per_s=busbw,
        weight=weight,
        line_rate_gbytes_per_s=line,
    )


def _m(
    colls: list[CollectiveResult], p99: float | None, pause_us: list[int],
    duration_s: float = 0.01, replicate: int = 0, tenant_gbps: float | None = None,
) -> Measurement:
    before = Counters(
        ports={f"host{i}/mlx5_0": {"rx_prio3_pause_duration": 0} for i in range(len(pause_us))}
    )
    after = Counters(
        ports={f"host{i}/mlx5_0": {"rx_prio3_pause_duration": v} for i, v in enumerate(pause_us)}
    )
    lat = (
        LatencyResult(count=100, p50_us=p99 / 2, p99_us=p99, p999_us=p99 * 2, max_us=p99 * 3)
        if p99 is not None
        else None
    )
    return Measurement(
        collectives=colls,
        latency=lat,
        counters_before=before,
        counters_after=after,
        duration_s=duration_s,
        replicate=replicate,
        tenants=[TenantResult(name="background0", priority="roce", goodput_gbps=tenant_gbps)]
        if tenant_gbps is not None else [],
    )


def test_busbw_is_weighted_mean_of_line_rate_share() -> None:
    # alltoall at 10/12.5 = 0.8 with weight 2, all_reduce at 5/12.5 = 0.4 with weight 1
    m = _m([_coll("alltoall", 10.0, 2.0), _coll("all_reduce", 5.0, 1.0)], None, [0])
    assert busbw_norm(m) == pytest.approx((2 * 0.8 + 0.4) / 3)


def test_pause_rate_is_mean_over_nic_ports_per_second() -> None:
    # 100 µs and 300 µs paused in 0.01 s => mean 200 µs per 0.01 s = 20000 µs/s
    m = _m([], 5.0, [100, 300])
    assert pause_us_per_s(m) == pytest.approx(20_000.0)


G = Guardrails(p99_target_us=10.0, max_pfc_pause_us_per_s=1000.0, max_busbw_loss_percent=20)
CFG = ScoreConfig(mode="scalar", busbw_weight=1.0, latency_weight=0.5, pfc_weight=0.5,
                  guardrails=G)
PRIMARY = ScoreConfig(guardrails=G)


def test_the_baseline_scores_zero_against_itself() -> None:
    b = _m([_coll("alltoall", 8.0, 1.0)], 40.0, [5], tenant_gbps=80.0)  # 500 µs/s paused
    s = score([b], [b], CFG)
    assert s.scalar == 0.0 and s.busbw_term == 0.0 and s.latency_term == 0.0
    assert s.pfc_term == 0.0 and s.feasible and log2_percent(s.scalar) == 0.0
    assert score([b], [b], PRIMARY).scalar == 0.0


def test_terms_are_paired_log_ratios() -> None:
    base = _m([_coll("alltoall", 5.0, 1.0)], 40.0, [10])  # 1000 µs/s, p99 40
    trial = _m([_coll("alltoall", 10.0, 1.0)], 20.0, [0])  # 2x busbw, half the p99, no pause
    s = score([trial], [base], CFG)
    assert s.busbw_term == pytest.approx(1.0)  # log2(10/5)
    assert s.latency_term == pytest.approx(math.tanh(1.0))  # log2(40/20) = 1
    assert s.pfc_term == pytest.approx(math.tanh(1.0))  # log2((1000+1000)/(1000+0))
    assert s.scalar == pytest.approx(1.0 + 0.5 * math.tanh(1.0) * 2)
    assert s.busbw_ratio == pytest.approx(2.0)
    assert s.constraints["busbw_loss"] == pytest.approx(math.tanh(0.8 - 2.0))
    # The primary mode maximises busbw alone: the same trial is worth exactly its busbw.
    assert score([trial], [base], PRIMARY).values == (pytest.approx(1.0),)


def test_latency_below_the_target_earns_nothing_more() -> None:
    base = _m([], 10.0, [0])
    assert score([_m([], 2.0, [0])], [base], CFG).latency_term == 0.0  # both at/below 10 µs
    assert score([_m([], 2.0, [0])], [_m([], 20.0, [0])], CFG).latency_term == pytest.approx(
        math.tanh(1.0))  # 20 -> max(2, 10)


def test_replicates_pair_by_index() -> None:
    # Replicate 1 is a placement where everything is slower; pairing removes that.
    base = [_m([_coll("alltoall", 8.0, 1)], None, [0], replicate=0),
            _m([_coll("alltoall", 4.0, 1)], None, [0], replicate=1)]
    trial = [_m([_coll("alltoall", 4.0, 1)], None, [0], replicate=1),
             _m([_coll("alltoall", 8.0, 1)], None, [0], replicate=0)]
    s = score(trial, base, CFG)
    assert s.per_replicate == (0.0, 0.0)  # the same as the baseline on each placement
    swapped = [t.model_copy(update={"replicate": 1 - t.replicate}) for t in trial]
    assert score(swapped, base, CFG).per_replicate == (-1.0, 1.0)  # unpaired: noise


def test_halving_busbw_never_beats_the_baseline_whatever_latency_and_pfc() -> None:
    """The property (issue: an honest score): over random baselines and trials whose busbw is
    half the baseline's, with p99 and PFC anywhere from far worse to perfect, the score stays
    below 0 and the default busbw floor marks the trial infeasible."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        bw = float(rng.uniform(0.5, 12.0))
        bp99, tp99 = (float(x) for x in rng.uniform(0.5, 5000.0, 2))
        bpause, tpause = (int(x) for x in rng.integers(0, 500_000, 2))
        cfg = ScoreConfig(mode="scalar", busbw_weight=1.0,
                          latency_weight=float(rng.uniform(0, 0.5)),
                          pfc_weight=float(rng.uniform(0, 0.5)),
                          guardrails=Guardrails(p99_target_us=float(rng.uniform(0.1, 100.0))))
        base = _m([_coll("alltoall", bw, 1)], bp99, [bpause])
        trial = _m([_coll("alltoall", bw / 2, 1)], tp99, [tpause])
        s = score([trial], [base], cfg)
        assert s.scalar < 0.0, (bw, bp99, tp99, bpause, tpause, cfg)
        assert not s.feasible and s.constraints["busbw_loss"] > 0
        assert s.violations()[0] == ("busbw_loss", "busbw -50.0 % (allowed -20 %) on "
                                                   "placement 0")


def test_weights_that_could_buy_back_a_halving_are_refused() -> None:
    assert check_weights(1.0, 0.5, 0.5) is None
    assert "exceeds busbw_weight" in (check_weights(1.0, 1.0, 0.5) or "")


def test_tenant_sharing_the_roce_priority_is_a_constraint() -> None:
    base = _m([_coll("alltoall", 8.0, 1)], None, [0], tenant_gbps=80.0)
    ok = score([_m([_coll("alltoall", 8.0, 1)], None, [0], tenant_gbps=70.0)], [base], CFG)
    starved = score([_m([_coll("alltoall", 9.0, 1)], None, [0], tenant_gbps=60.0)], [base], CFG)
    assert ok.feasible
    assert ok.constraints["tenant_goodput"] == pytest.approx(math.tanh(0.8 - 70 / 80))
    assert not starved.feasible  # lost 25 % > the default 20 %
    assert starved.scalar > 0  # a better score alone does not make it a candidate
    assert ok.violations() == []
    assert starved.violations() == [("tenant_goodput", "tenant goodput -25.0 % (allowed -20 "
                                                       "%) on placement 0")]


def test_guardrails_are_judged_on_every_placement_not_the_mean() -> None:
    """The issue's case: a tenant within its allowance on the mean over placements but beyond
    it on one placement makes the trial infeasible, and that placement is named."""
    base = [_m([_coll("alltoall", 8.0, 1)], 10.0, [0], replicate=r, tenant_gbps=80.0)
            for r in range(4)]
    gp = [76.0, 76.0, 76.0, 62.0]  # -5, -5, -5, -22.5 %: mean -9 %, within the 20 % allowance
    trial = [_m([_coll("alltoall", 9.0, 1)], 10.0, [0], replicate=r, tenant_gbps=g)
             for r, g in enumerate(gp)]
    s = score(trial, base, PRIMARY)
    assert s.tenant_ratio == pytest.approx(np.mean(gp) / 80)  # 0.909: the mean passes
    assert not s.feasible
    assert s.constraints["tenant_goodput"] == pytest.approx(math.tanh(0.8 - 62 / 80))
    assert s.violations() == [("tenant_goodput", "tenant goodput -22.5 % (allowed -20 %) on "
                                                 "placement 3")]
    # p99: within the target or the baseline's +25 % on that placement; PFC: per placement.
    p99s = [12.0, 9.0, 40.0, 10.0]  # placement 2: 40 > max(10, 25 * 1.25)
    base2 = [_m([_coll("alltoall", 8.0, 1)], b, [0], replicate=r)
             for r, b in enumerate([5.0, 5.0, 25.0, 5.0])]
    t2 = [_m([_coll("alltoall", 8.0, 1)], p, [0, 0] if r != 1 else [30, 10], replicate=r)
          for r, p in enumerate(p99s)]
    s2 = score(t2, base2, PRIMARY)
    assert [c for c, _ in s2.violations()] == ["p99", "pfc_pause"]
    assert s2.violations()[0][1] == ("probe p99 25 -> 40 µs (allowed 31.2 µs: 10 µs or "
                                     "baseline +25 %) on placement 2")
    assert "2000 µs/s" in s2.violations()[1][1] and "placement 1" in s2.violations()[1][1]


def test_multi_objective_values_and_pfc_constraint() -> None:
    cfg = ScoreConfig(mode="multi", guardrails=Guardrails(max_pfc_pause_us_per_s=1000.0))
    base = _m([_coll("alltoall", 10.0, 1.0)], 12.0, [0])
    s = score([_m([_coll("alltoall", 10.0, 1.0)], 12.0, [20], duration_s=0.01)], [base], cfg)
    assert s.values == (pytest.approx(0.8), 12.0)
    assert s.constraints["pfc_pause"] == pytest.approx(math.tanh((2000.0 - 1000.0) / 1000.0))
    assert s.violations() == [("pfc_pause", "PFC pause 2000 µs/s (0.20 % of the time; allowed "
                                            "1000 µs/s) on placement 0")]


def test_t_interval_and_pareto_front() -> None:
    # scipy.stats.t.ppf(0.975, 4) = 2.776; sd 0.0158, n 5: half-width 0.0196
    lo, hi = t_interval([0.10, 0.12, 0.08, 0.11, 0.09])
    assert (lo, hi) == (pytest.approx(0.1 - 0.019632, abs=1e-5),
                        pytest.approx(0.1 + 0.019632, abs=1e-5))
    # Bonferroni for 3 candidates: t.ppf(1 - 0.05 / 6, 4) = 3.961, wider
    lo3, hi3 = t_interval([0.10, 0.12, 0.08, 0.11, 0.09], comparisons=3)
    assert lo3 == pytest.approx(0.1 - 3.961 * 0.015811 / math.sqrt(5), abs=1e-4) and lo3 < lo
    lo, hi = t_interval([0.3, -0.3, 0.2, -0.25])
    assert lo < 0 < hi  # straddles 0: nothing to confirm
    assert t_interval([0.5]) == (-math.inf, math.inf)  # one pair: no interval at all
    assert log2_percent(1.0) == pytest.approx(100.0)
    pts = [(0, (0.5, 10.0)), (1, (0.6, 12.0)), (2, (0.4, 11.0)), (3, (0.6, 9.0))]
    assert pareto_front(pts, ["maximize", "minimize"]) == [3]
    pts2 = [(0, (0.5, 8.0)), (1, (0.7, 12.0)), (2, (0.4, 11.0))]
    assert pareto_front(pts2, ["maximize", "minimize"]) == [0, 1]
