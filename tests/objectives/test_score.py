"""Scoring formulas (objectives/score.py docstring) pinned with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from objectives.measurement import CollectiveResult, Counters, LatencyResult, Measurement
from objectives.score import (
    ScoreConfig,
    busbw_norm,
    directions,
    improvement_percent,
    pareto_front,
    pause_us_per_s,
    score,
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
    colls: list[CollectiveResult], p99: float | None, pause_us: list[int], duration_s: float = 0.01
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
    )


def test_busbw_is_weighted_mean_of_line_rate_share() -> None:
    # alltoall at 10/12.5 = 0.8 with weight 2, all_reduce at 5/12.5 = 0.4 with weight 1
    m = _m([_coll("alltoall", 10.0, 2.0), _coll("all_reduce", 5.0, 1.0)], None, [0])
    assert busbw_norm(m) == pytest.approx((2 * 0.8 + 0.4) / 3)


def test_pause_rate_is_mean_over_nic_ports_per_second() -> None:
    # 100 µs and 300 µs paused in 0.01 s => mean 200 µs per 0.01 s = 20000 µs/s
    m = _m([], 5.0, [100, 300])
    assert pause_us_per_s(m) == pytest.approx(20_000.0)


def test_scalar_combines_the_three_terms() -> None:
    cfg = ScoreConfig(
        busbw_weight=1.0,
        latency_weight=0.5,
        pfc_weight=0.5,
        p99_target_us=10.0,
        pfc_budget_us_per_s=1000.0,
    )
    m = _m([_coll("alltoall", 10.0, 1.0)], 20.0, [10, 10], duration_s=0.01)  # 1000 µs/s
    s = score(m, cfg)
    assert s.busbw_term == pytest.approx(0.8)
    assert s.latency_term == pytest.approx(0.5)  # target 10 / p99 20
    assert s.pfc_term == pytest.approx(0.5)  # exactly at the budget
    assert s.scalar == pytest.approx((0.8 + 0.25 + 0.25) / 2.0)
    assert s.values == (s.scalar,)
    assert s.constraint == pytest.approx(0.0)


def test_latency_on_target_scores_one_and_missing_terms_drop_out() -> None:
    cfg = ScoreConfig(p99_target_us=10.0)
    s = score(_m([], 4.0, [0]), cfg)  # no collectives: busbw drops out
    assert s.busbw_term is None
    assert s.latency_term == 1.0 and s.pfc_term == 1.0
    assert s.scalar == pytest.approx(1.0)


def test_less_pfc_and_lower_latency_score_higher() -> None:
    cfg = ScoreConfig()
    worse = score(_m([_coll("alltoall", 8.0, 1)], 50.0, [5000]), cfg)
    better = score(_m([_coll("alltoall", 8.0, 1)], 15.0, [50]), cfg)
    assert better.scalar > worse.scalar


def test_multi_objective_values_and_constraint() -> None:
    cfg = ScoreConfig(mode="multi", pfc_budget_us_per_s=1000.0)
    s = score(_m([_coll("alltoall", 10.0, 1.0)], 12.0, [20], duration_s=0.01), cfg)
    assert s.values == (pytest.approx(0.8), 12.0)
    assert s.constraint == pytest.approx(2000.0 - 1000.0)  # infeasible: over the budget
    assert directions("multi") == ["maximize", "minimize"]
    assert directions("scalar") == ["maximize"]


def test_improvement_and_pareto_front() -> None:
    assert improvement_percent(0.6, 0.5) == pytest.approx(20.0)
    assert math.isinf(improvement_percent(0.1, 0.0))
    pts = [(0, (0.5, 10.0)), (1, (0.6, 12.0)), (2, (0.4, 11.0)), (3, (0.6, 9.0))]
    # 3 dominates 0 (higher busbw, lower p99) and 1 and 2; nothing dominates 3
    assert pareto_front(pts, ["maximize", "minimize"]) == [3]
    pts2 = [(0, (0.5, 8.0)), (1, (0.7, 12.0)), (2, (0.4, 11.0))]
    assert pareto_front(pts2, ["maximize", "minimize"]) == [0, 1]
