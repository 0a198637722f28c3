"""Scoring: a trial's measurements against the baseline's on the same replicates -> one number.

Every trial is measured on the study's paired replicates (the same placement and seed for every
trial), and every term compares the trial with the baseline *on the same replicate*, so the
placement's luck cancels (common random numbers). Per replicate:

* **busbw** ``= log2(busbw / busbw_base)``, averaged over the collectives with the mix weights
  (nccl-tests bus bandwidth, doc/PERFORMANCE.md of NVIDIA/nccl-tests). Unbounded: halving the
  bus bandwidth costs exactly -1.
* **latency** ``= tanh(log2(max(p99_base, T) / max(p99, T)))`` for the latency probes' p99 and
  the experiment's ``p99_target_us`` T: bounded to (-1, 1), so it can never buy back a halving of
  bus bandwidth; improvements below the target earn nothing more.
* **pfc** ``= tanh(log2((B + pause_base) / (B + pause)))`` for the PFC pause time received per
  second (mean over the canary NIC ports, ``rx_prio<p>_pause_duration`` µs, mlx5 ethtool) and
  the budget B (``pfc_budget_us_per_s``): 0 when both are quiet, bounded to (-1, 1).

The scalar score is ``wb*busbw + wl*latency + wp*pfc`` in log2 units of bus bandwidth; the
baseline scores exactly 0 on every replicate, and ``equivalent_percent(score) = (2**score - 1)
* 100`` reads as "worth as much as this much more bus bandwidth". Because the bounded terms are
weighted at most ``wb`` together (``check_weights``), a trial that halves bus bandwidth can never
beat the baseline, whatever its latency and PFC.

Constraints (feasible when <= 0, told to Optuna so the sampler learns where not to go):
``busbw_floor`` (``min_busbw_ratio`` minus the paired busbw ratio), ``tenant_goodput`` (the
worst RoCE-class background tenant's goodput ratio below ``1 - max_tenant_loss_percent``), and in
multi-objective mode ``pfc_budget`` (pause µs/s over the budget). The loop adds ``safety`` (a
rolled-back trial) and ``static_limits`` (a rejected proposal).

Multi-objective mode maximises the mix-weighted busbw / line rate and minimises p99 (µs), both
averaged over the replicates. A term whose data is missing on either side drops out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from objectives.measurement import Measurement


@dataclass(frozen=True)
class ScoreConfig:
    """The experiment file's ``objective:`` section and the paired constraints of ``safety:``."""

    mode: str = "scalar"  # "scalar" | "multi"
    busbw_weight: float = 1.0
    latency_weight: float = 0.5
    pfc_weight: float = 0.5
    p99_target_us: float = 20.0
    pfc_budget_us_per_s: float = 1000.0
    priority: int = 3
    min_busbw_ratio: float = 0.8
    max_tenant_loss_percent: float = 20.0


def check_weights(busbw: float, latency: float, pfc: float) -> str | None:
    """Why a weight set is refused (None: fine): the bounded terms must not outweigh busbw."""
    if latency + pfc > busbw:
        return (f"latency_weight + pfc_weight ({latency + pfc:g}) exceeds busbw_weight "
                f"({busbw:g}): the latency and PFC terms are bounded to +-1 each, and keeping "
                "their weights within the busbw weight is what stops a trial that halves bus "
                "bandwidth from beating the baseline (use objective.mode: multi to trade "
                "bandwidth for latency explicitly)")
    return None


@dataclass(frozen=True)
class Raw:
    """The absolute figures of one measurement that the score reads."""

    busbw: dict[tuple[str, int], tuple[float, float]]  # (op, size) -> (busbw GB/s, weight)
    busbw_norm: float | None  # mix-weighted busbw / line rate
    p99_us: float | None
    pause_us_per_s: float
    tenants: dict[str, float]  # RoCE-class background tenants: name -> goodput Gb/s


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


def raw(m: Measurement, priority: int = 3) -> Raw:
    p99 = m.latency.p99_us if m.latency is not None and m.latency.count > 0 else None
    return Raw(busbw={(c.name, c.size_bytes): (c.busbw_gbytes_per_s, c.weight)
                      for c in m.collectives if c.weight > 0},
               busbw_norm=busbw_norm(m), p99_us=p99, pause_us_per_s=pause_us_per_s(m, priority),
               tenants={t.name: t.goodput_gbps for t in m.tenants if t.priority == "roce"})


@dataclass(frozen=True)
class Terms:
    """One replicate of a trial against the same replicate of the baseline."""

    busbw: float | None  # log2 ratio, mix-weighted
    busbw_ratio: float | None  # 2**busbw
    latency: float | None
    pfc: float
    tenant_ratio: float | None  # worst RoCE-class tenant goodput ratio
    scalar: float


_FLOOR = 1e-9


def terms(m: Raw, b: Raw, cfg: ScoreConfig) -> Terms:
    """The score terms of one paired replicate (see the module docstring)."""
    num = den = 0.0
    for key, (bw, w) in m.busbw.items():
        ref = b.busbw.get(key)
        if ref is None or ref[0] <= 0:
            continue
        num += w * math.log2(max(bw, _FLOOR) / ref[0])
        den += w
    bw_t = num / den if den > 0 else None
    lat = None
    if m.p99_us is not None and b.p99_us is not None:
        t = cfg.p99_target_us
        lat = math.tanh(math.log2(max(b.p99_us, t) / max(m.p99_us, t)))
    budget = cfg.pfc_budget_us_per_s
    pfc = math.tanh(math.log2((budget + b.pause_us_per_s) / (budget + m.pause_us_per_s)))
    ratios = [m.tenants.get(k, 0.0) / v for k, v in b.tenants.items() if v > 0]
    tenant = min(ratios) if ratios else None
    used = [(cfg.busbw_weight, bw_t), (cfg.latency_weight, lat), (cfg.pfc_weight, pfc)]
    scalar = sum(w * x for w, x in used if x is not None)
    return Terms(busbw=bw_t, busbw_ratio=2 ** bw_t if bw_t is not None else None,
                 latency=lat, pfc=pfc, tenant_ratio=tenant, scalar=scalar)


@dataclass(frozen=True)
class Score:
    """A trial scored over its replicates. ``values`` is what Optuna is told."""

    scalar: float  # mean of the per-replicate scalars (0 = the baseline)
    per_replicate: tuple[float, ...]
    busbw_term: float | None
    latency_term: float | None
    pfc_term: float
    busbw_ratio: float | None  # paired, mean over replicates
    tenant_ratio: float | None
    busbw_norm: float | None  # absolute, for display and the multi-objective mode
    p99_us: float | None
    pause_us_per_s: float
    values: tuple[float, ...]
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    def violations(self, cfg: ScoreConfig) -> list[tuple[str, str]]:
        """Each constraint broken: (code, what was measured against what is allowed)."""
        out = []
        if self.constraints.get("busbw_floor", 0.0) > 0 and self.busbw_ratio is not None:
            out.append(("busbw_floor", f"paired busbw ratio {self.busbw_ratio:.2f} < "
                                       f"{cfg.min_busbw_ratio:g}"))
        if self.constraints.get("tenant_goodput", 0.0) > 0 and self.tenant_ratio is not None:
            out.append(("tenant_goodput", f"tenant goodput ratio {self.tenant_ratio:.2f} < "
                                          f"{1 - cfg.max_tenant_loss_percent / 100:g}"))
        if self.constraints.get("pfc_budget", 0.0) > 0:
            out.append(("pfc_budget", f"PFC pause {self.pause_us_per_s:.0f} µs/s > "
                                      f"{cfg.pfc_budget_us_per_s:g}"))
        return out

    def metrics(self) -> dict[str, float]:
        out = {"score": self.scalar, "pfc_term": self.pfc_term,
               "pause_us_per_s": self.pause_us_per_s,
               "equivalent_percent": equivalent_percent(self.scalar)}
        for k, v in (("busbw_term", self.busbw_term), ("latency_term", self.latency_term),
                     ("busbw_ratio", self.busbw_ratio), ("tenant_ratio", self.tenant_ratio),
                     ("busbw_norm", self.busbw_norm), ("p99_us", self.p99_us)):
            if v is not None:
                out[k] = v
        out.update({f"constraint_{k}": v for k, v in self.constraints.items()})
        return out


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def score(trial: Sequence[Measurement], baseline: Sequence[Measurement],
          cfg: ScoreConfig) -> Score:
    """Score a trial's replicates against the baseline's (paired by ``Measurement.replicate``;
    a replicate the baseline lacks is paired with the baseline's first)."""
    if not trial or not baseline:
        raise ValueError("score needs at least one trial and one baseline measurement")
    base = {b.replicate: raw(b, cfg.priority) for b in baseline}
    first = raw(baseline[0], cfg.priority)
    rs = [raw(m, cfg.priority) for m in trial]
    ts = [terms(r, base.get(m.replicate, first), cfg) for r, m in zip(rs, trial, strict=True)]
    bw_ratio = _mean([t.busbw_ratio for t in ts])
    tenant = _mean([t.tenant_ratio for t in ts])
    pause = float(np.mean([r.pause_us_per_s for r in rs]))
    norm = _mean([r.busbw_norm for r in rs])
    p99 = _mean([r.p99_us for r in rs])
    cons: dict[str, float] = {}
    if bw_ratio is not None:
        cons["busbw_floor"] = cfg.min_busbw_ratio - bw_ratio
    if tenant is not None:
        cons["tenant_goodput"] = (1 - cfg.max_tenant_loss_percent / 100) - tenant
    if cfg.mode == "multi":
        cons["pfc_budget"] = pause - cfg.pfc_budget_us_per_s
    scalar = float(np.mean([t.scalar for t in ts]))
    if cfg.mode == "scalar":
        values: tuple[float, ...] = (scalar,)
    else:
        values = (norm if norm is not None else 0.0, p99 if p99 is not None else math.inf)
    return Score(scalar=scalar, per_replicate=tuple(t.scalar for t in ts),
                 busbw_term=_mean([t.busbw for t in ts]),
                 latency_term=_mean([t.latency for t in ts]),
                 pfc_term=float(np.mean([t.pfc for t in ts])), busbw_ratio=bw_ratio,
                 tenant_ratio=tenant, busbw_norm=norm, p99_us=p99, pause_us_per_s=pause,
                 values=values, constraints=cons)


def equivalent_percent(score_value: float) -> float:
    """A score as the bus-bandwidth gain it is worth, in % (0 = the baseline)."""
    return (2.0 ** score_value - 1.0) * 100.0


def bootstrap_ci(diffs: Sequence[float], *, level: float = 0.95, resamples: int = 4000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of paired differences (seeded: reproducible).

    One difference gives a zero-width interval at it; report the repeats alongside.
    """
    x = np.asarray(diffs, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one difference")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)


def pareto_front(points: list[tuple[int, tuple[float, ...]]],
                 dirs: list[str]) -> list[int]:
    """Ids of the non-dominated points (``points`` are ``(id, values)``), in input order."""
    sign = [1.0 if d == "maximize" else -1.0 for d in dirs]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        ge = all(s * x >= s * y for s, x, y in zip(sign, a, b, strict=True))
        gt = any(s * x > s * y for s, x, y in zip(sign, a, b, strict=True))
        return ge and gt

    return [i for i, v in points if not any(dominates(w, v) for j, w in points if j != i)]
