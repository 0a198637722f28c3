"""Scoring: one measurement -> the numbers the optimiser sees.

Three terms, each in [0, 1] with 1 best, computed from a ``Measurement``:

* **busbw**: for every collective, ``busbw / line_rate`` (nccl-tests bus bandwidth, whose ideal
  is the NIC line rate: doc/PERFORMANCE.md of NVIDIA/nccl-tests), averaged with the mix weights;
* **latency**: ``min(1, p99_target_us / p99_us)`` of the latency probes (1 when on target);
* **pfc**: ``1 / (1 + pause_us_per_s / pfc_budget_us_per_s)``, where ``pause_us_per_s`` is the
  PFC pause time received per second, averaged over the canary NIC ports
  (``rx_prio<p>_pause_duration``, µs, mlx5 ethtool) - 1 without pauses, 0.5 at the budget.

Scalar mode maximises ``(wb*busbw + wl*latency + wp*pfc) / (wb + wl + wp)``.
Multi-objective mode maximises busbw, minimises p99 (µs), and treats
``pause_us_per_s - pfc_budget_us_per_s <= 0`` as an Optuna constraint.
A term whose data is missing (no probes, no collectives) drops out of the weighted mean.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from objectives.measurement import Measurement

_PAUSE_DURATION = re.compile(r"^rx_prio(\d)_pause_duration$")


@dataclass(frozen=True)
class ScoreConfig:
    """The experiment file's ``objective:`` section, as the scorer needs it."""

    mode: str = "scalar"  # "scalar" | "multi"
    busbw_weight: float = 1.0
    latency_weight: float = 0.5
    pfc_weight: float = 0.5
    p99_target_us: float = 20.0
    pfc_budget_us_per_s: float = 1000.0
    priority: int = 3


@dataclass(frozen=True)
class Score:
    """A scored measurement. ``values`` is what Optuna is told; ``constraint`` <= 0 is feasible."""

    scalar: float
    busbw_term: float | None
    latency_term: float | None
    pfc_term: float
    busbw_norm: float | None  # mix-weighted busbw / line rate
    p99_us: float | None
    pause_us_per_s: float
    values: tuple[float, ...]
    constraint: float

    def metrics(self) -> dict[str, float]:
        out = {"score": self.scalar, "pfc_term": self.pfc_term,
               "pause_us_per_s": self.pause_us_per_s, "pfc_constraint": self.constraint}
        if self.busbw_term is not None:
            out["busbw_term"] = self.busbw_term
            out["busbw_norm"] = self.busbw_norm or 0.0
        if self.latency_term is not None:
            out["latency_term"] = self.latency_term
        return out


def directions(mode: str) -> list[str]:
    """Optuna study directions for a mode."""
    return ["maximize"] if mode == "scalar" else ["maximize", "minimize"]


def busbw_norm(m: Measurement) -> float | None:
    """Mix-weighted mean of busbw / line rate over the collectives (None without any)."""
    num = den = 0.0
    for c in m.collectives:
        if c.line_rate_gbytes_per_s <= 0 or c.weight <= 0:
            continue
        num += c.weight * c.busbw_gbytes_per_s / c.line_rate_gbytes_per_s
        den += c.weight
    return num / den if den > 0 else None


def pause_us_per_s(m: Measurement, priority: int = 3) -> float:
    """PFC pause time received per second of measurement, averaged over NIC ports."""
    name = f"rx_prio{priority}_pause_duration"
    rows = [row[name] for row in m.counters.ports.values() if name in row]
    if not rows or m.duration_s <= 0:
        return 0.0
    return sum(rows) / len(rows) / m.duration_s


def score(m: Measurement, cfg: ScoreConfig) -> Score:
    """Score one measurement (pure; see the module docstring for the formulas)."""
    bw = busbw_norm(m)
    p99 = m.latency.p99_us if m.latency is not None and m.latency.count > 0 else None
    lat = min(1.0, cfg.p99_target_us / p99) if p99 is not None and p99 > 0 else None
    pause = pause_us_per_s(m, cfg.priority)
    pfc = 1.0 / (1.0 + pause / cfg.pfc_budget_us_per_s)
    terms = [(cfg.busbw_weight, bw), (cfg.latency_weight, lat), (cfg.pfc_weight, pfc)]
    used = [(w, t) for w, t in terms if t is not None and w > 0]
    wsum = sum(w for w, _ in used)
    scalar = sum(w * t for w, t in used) / wsum if wsum > 0 else 0.0
    constraint = pause - cfg.pfc_budget_us_per_s
    if cfg.mode == "scalar":
        values: tuple[float, ...] = (scalar,)
    else:
        values = (bw if bw is not None else 0.0, p99 if p99 is not None else math.inf)
    return Score(scalar=scalar, busbw_term=bw, latency_term=lat, pfc_term=pfc, busbw_norm=bw,
                 p99_us=p99, pause_us_per_s=pause, values=values, constraint=constraint)


def improvement_percent(best: float, baseline: float) -> float:
    """Relative gain of ``best`` over ``baseline`` in %, for a maximised score."""
    if baseline == 0:
        return math.inf if best > 0 else 0.0
    return (best - baseline) / abs(baseline) * 100.0


def pareto_front(points: list[tuple[int, tuple[float, ...]]],
                 dirs: list[str]) -> list[int]:
    """Ids of the non-dominated points (``points`` are ``(id, values)``), in input order."""
    sign = [1.0 if d == "maximize" else -1.0 for d in dirs]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        ge = all(s * x >= s * y for s, x, y in zip(sign, a, b, strict=True))
        gt = any(s * x > s * y for s, x, y in zip(sign, a, b, strict=True))
        return ge and gt

    return [i for i, v in points if not any(dominates(w, v) for j, w in points if j != i)]
