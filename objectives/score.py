"""Scoring: a trial's measurements against the baseline's on the same replicates.

Every trial is measured on the study's paired replicates (the same placement and seed for every
trial), and every comparison is with the baseline *on the same replicate*, so the placement's
luck cancels (common random numbers).

**What is maximised** (``objective.mode``):

* ``primary`` (the default): the primary metric alone, as the mean paired log2 ratio over the
  replicates. ``busbw``: ``log2(busbw / busbw_base)``, mix-weighted over the collectives
  (nccl-tests bus bandwidth, doc/PERFORMANCE.md of NVIDIA/nccl-tests); ``p99_us``: minus
  ``log2(p99 / p99_base)`` of the latency probes. ``log2_percent`` turns it into the metric's
  own % change.
* ``scalar`` (explicit option): a composite ``wb*busbw + wl*latency + wp*pfc`` with
  ``latency = tanh(log2(max(p99_base, T) / max(p99, T)))`` and
  ``pfc = tanh(log2((B + pause_base) / (B + pause)))``, bounded terms whose weights may not
  outweigh busbw (``check_weights``). A unitless score: never a percentage of anything.
* ``multi``: the mix-weighted busbw / line rate up and p99 (µs) down, a Pareto front.

**Guardrails** (``objective.guardrails``), each checked on *every placement* (replicate), never on
the mean over placements, and told to Optuna as constraints (feasible when <= 0: ``tanh`` of the
worst placement's relative margin, bounded so that no one guardrail swamps the others):

* ``busbw_loss``: busbw ratio >= ``1 - max_busbw_loss_percent / 100``;
* ``tenant_goodput``: every RoCE-class background tenant's goodput ratio >=
  ``1 - max_tenant_loss_percent / 100``;
* ``p99``: probe p99 <= ``p99_target_us`` or <= the baseline's p99 on that placement times
  ``1 + p99_allowance_percent / 100``;
* ``pfc_pause``: PFC pause time received per second (mean over the canary NIC ports,
  ``rx_prio<p>_pause_duration`` µs, mlx5 ethtool) <= ``max_pfc_pause_us_per_s``.

The baseline can break only the absolute one (PFC pause); then the winner is the best setting
that meets it, and ``objectives.verdict`` states the price in busbw. The loop adds ``safety`` (a
rolled-back trial), ``static_limits`` (a rejected proposal) and ``screen``.
A term whose data is missing on either side drops out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from objectives.measurement import Measurement


class Guardrails(BaseModel):
    """The experiment file's ``objective.guardrails``: limits checked on every placement."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_busbw_loss_percent: float = Field(default=20.0, ge=0, le=100)
    max_tenant_loss_percent: float = Field(default=20.0, ge=0, le=100)  # RoCE-class tenants
    # p99 is met when p99 <= p99_target_us, or <= baseline p99 * (1 + p99_allowance_percent);
    # max_pfc_pause_us_per_s: µs paused per s, per port. All finite: .inf switched the p99
    # guardrail off and made the PFC margin NaN (a traceback when the trial was told).
    p99_target_us: float = Field(default=20.0, gt=0, allow_inf_nan=False)
    p99_allowance_percent: float = Field(default=25.0, ge=0, allow_inf_nan=False)
    max_pfc_pause_us_per_s: float = Field(default=1000.0, gt=0, allow_inf_nan=False)


GUARDRAILS = ("busbw_loss", "tenant_goodput", "p99", "pfc_pause")


@dataclass(frozen=True)
class ScoreConfig:
    """The experiment file's ``objective:`` section and the RoCE priority."""

    mode: str = "primary"  # "primary" | "scalar" | "multi"
    primary: str = "busbw"  # "busbw" | "p99_us"
    busbw_weight: float = 1.0
    latency_weight: float = 0.5
    pfc_weight: float = 0.5
    guardrails: Guardrails = field(default_factory=Guardrails)
    priority: int = 3


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


def busbw_gbytes_per_s(m: Measurement) -> float | None:
    """Mix-weighted mean bus bandwidth over the collectives, GB/s (None without any)."""
    num = den = 0.0
    for c in m.collectives:
        if c.weight > 0:
            num += c.weight * c.busbw_gbytes_per_s
            den += c.weight
    return num / den if den > 0 else None


def busbw_norm(m: Measurement) -> float | None:
    """Mix-weighted mean of busbw / line rate over the collectives (None without any)."""
    num = den = 0.0
    for c in m.collectives:
        if c.line_rate_gbytes_per_s <= 0 or c.weight <= 0:
            continue
        num += c.weight * c.busbw_gbytes_per_s / c.line_rate_gbytes_per_s
        den += c.weight
    return num / den if den > 0 else None


def per_port_per_s(m: Measurement, name: str) -> float | None:
    """Counter ``name`` per second of measurement, averaged over the ports that have it (None:
    no port does, or no duration)."""
    rows = [row[name] for row in m.counters.ports.values() if name in row]
    if not rows or m.duration_s <= 0:
        return None
    return sum(rows) / len(rows) / m.duration_s


def pause_us_per_s(m: Measurement, priority: int = 3) -> float:
    """PFC pause time received per second of measurement, averaged over NIC ports."""
    return per_port_per_s(m, f"rx_prio{priority}_pause_duration") or 0.0


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
    latency: float | None  # the scalar mode's bounded p99 term
    p99_log2: float | None  # log2(p99 / p99_base)
    pfc: float
    tenant_ratio: float | None  # worst RoCE-class tenant goodput ratio
    scalar: float
    margins: dict[str, float]  # guardrail -> how far over its limit (<= 0: met)


_FLOOR = 1e-9


def p99_limit_us(base_p99_us: float, g: Guardrails) -> float:
    """The p99 a placement may reach: the target, or the baseline's p99 plus the allowance."""
    return max(g.p99_target_us, base_p99_us * (1 + g.p99_allowance_percent / 100))


def terms(m: Raw, b: Raw, cfg: ScoreConfig) -> Terms:
    """The score terms and guardrail margins of one paired replicate (module docstring)."""
    num = den = 0.0
    for key, (bw, w) in m.busbw.items():
        ref = b.busbw.get(key)
        if ref is None or ref[0] <= 0:
            continue
        num += w * math.log2(max(bw, _FLOOR) / ref[0])
        den += w
    bw_t = num / den if den > 0 else None
    g = cfg.guardrails
    lat = p99_log2 = None
    if m.p99_us is not None and b.p99_us is not None:
        t = g.p99_target_us
        lat = math.tanh(math.log2(max(b.p99_us, t) / max(m.p99_us, t)))
        p99_log2 = math.log2(max(m.p99_us, _FLOOR) / max(b.p99_us, _FLOOR))
    budget = g.max_pfc_pause_us_per_s
    pfc = math.tanh(math.log2((budget + b.pause_us_per_s) / (budget + m.pause_us_per_s)))
    ratios = [m.tenants.get(k, 0.0) / v for k, v in b.tenants.items() if v > 0]
    tenant = min(ratios) if ratios else None
    used = [(cfg.busbw_weight, bw_t), (cfg.latency_weight, lat), (cfg.pfc_weight, pfc)]
    scalar = sum(w * x for w, x in used if x is not None)
    ratio = 2 ** bw_t if bw_t is not None else None
    margins = {"pfc_pause": (m.pause_us_per_s - budget) / budget}
    if ratio is not None:
        margins["busbw_loss"] = (1 - g.max_busbw_loss_percent / 100) - ratio
    if tenant is not None:
        margins["tenant_goodput"] = (1 - g.max_tenant_loss_percent / 100) - tenant
    if m.p99_us is not None and b.p99_us is not None:
        margins["p99"] = m.p99_us / p99_limit_us(b.p99_us, g) - 1
    return Terms(busbw=bw_t, busbw_ratio=ratio, latency=lat, p99_log2=p99_log2, pfc=pfc,
                 tenant_ratio=tenant, scalar=scalar, margins=margins)


def break_text(code: str, t: Terms, m: Raw, b: Raw, g: Guardrails) -> str:
    """One broken guardrail on one placement, in the metric's own unit."""
    if code == "busbw_loss" and t.busbw_ratio is not None:
        return (f"busbw {(t.busbw_ratio - 1) * 100:+.1f} % (allowed "
                f"-{g.max_busbw_loss_percent:g} %)")
    if code == "tenant_goodput" and t.tenant_ratio is not None:
        return (f"tenant goodput {(t.tenant_ratio - 1) * 100:+.1f} % (allowed "
                f"-{g.max_tenant_loss_percent:g} %)")
    if code == "p99" and m.p99_us is not None and b.p99_us is not None:
        return (f"probe p99 {b.p99_us:.3g} -> {m.p99_us:.3g} µs (allowed "
                f"{p99_limit_us(b.p99_us, g):.3g} µs: {g.p99_target_us:g} µs or baseline "
                f"+{g.p99_allowance_percent:g} %)")
    return (f"PFC pause {m.pause_us_per_s:.0f} µs/s ({m.pause_us_per_s / 1e4:.2f} % of the "
            f"time; allowed {g.max_pfc_pause_us_per_s:g} µs/s)")


@dataclass(frozen=True)
class Score:
    """A trial scored over its replicates. ``values`` is what Optuna is told."""

    scalar: float  # what the mode maximises, mean over replicates (0 = the baseline)
    per_replicate: tuple[float, ...]
    busbw_term: float | None
    latency_term: float | None
    pfc_term: float
    busbw_ratio: float | None  # paired, mean over replicates
    tenant_ratio: float | None  # paired, worst tenant, mean over replicates
    busbw_norm: float | None  # absolute, for display and the multi-objective mode
    p99_us: float | None
    pause_us_per_s: float
    values: tuple[float, ...]
    constraints: dict[str, float] = field(default_factory=dict)  # worst placement's margins
    # The guardrails broken, each on its worst placement: (code, replicate, text).
    broken: tuple[tuple[str, int, str], ...] = ()

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    def violations(self) -> list[tuple[str, str]]:
        """Each guardrail broken: (code, what was measured where, against what is allowed)."""
        return [(code, f"{text} on placement {rep}") for code, rep, text in self.broken]

    def metrics(self) -> dict[str, float]:
        out = {"score": self.scalar, "pfc_term": self.pfc_term,
               "pause_us_per_s": self.pause_us_per_s}
        for k, v in (("busbw_term", self.busbw_term), ("latency_term", self.latency_term),
                     ("busbw_ratio", self.busbw_ratio), ("tenant_ratio", self.tenant_ratio),
                     ("busbw_norm", self.busbw_norm), ("p99_us", self.p99_us)):
            if v is not None:
                out[k] = v
        if self.busbw_term is not None:
            out["busbw_change_percent"] = log2_percent(self.busbw_term)
        out.update({f"constraint_{k}": v for k, v in self.constraints.items()})
        return out


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def objective_of(t: Terms, cfg: ScoreConfig) -> float | None:
    """What the scalar and primary modes maximise on one replicate (None: no data)."""
    if cfg.mode == "scalar":
        return t.scalar
    if cfg.primary == "p99_us":
        return -t.p99_log2 if t.p99_log2 is not None else None
    return t.busbw


def paired_terms(trial: Sequence[Measurement], baseline: Sequence[Measurement],
                 cfg: ScoreConfig) -> list[tuple[int, Terms, Raw, Raw]]:
    """(replicate, terms, trial raw, baseline raw) per trial replicate, paired by
    ``Measurement.replicate`` (a replicate the baseline lacks pairs with its first)."""
    if not trial:
        return []
    base = {b.replicate: raw(b, cfg.priority) for b in baseline}
    first = raw(baseline[0], cfg.priority)
    out = []
    for m in trial:
        r, b = raw(m, cfg.priority), base.get(m.replicate, first)
        out.append((m.replicate, terms(r, b, cfg), r, b))
    return out


def score(trial: Sequence[Measurement], baseline: Sequence[Measurement],
          cfg: ScoreConfig) -> Score:
    """Score a trial's replicates against the baseline's (see the module docstring)."""
    if not trial or not baseline:
        raise ValueError("score needs at least one trial and one baseline measurement")
    rows = paired_terms(trial, baseline, cfg)
    ts = [t for _, t, _, _ in rows]
    rs = [r for _, _, r, _ in rows]
    cons: dict[str, float] = {}
    broken = []
    for code in GUARDRAILS:
        per = [(t.margins[code], rep, t, r, b) for rep, t, r, b in rows if code in t.margins]
        if not per:
            continue
        worst = max(per, key=lambda x: x[0])
        cons[code] = math.tanh(worst[0])  # bounded: no one guardrail swamps the others
        if worst[0] > 0:
            broken.append((code, worst[1], break_text(code, worst[2], worst[3], worst[4],
                                                      cfg.guardrails)))
    norm = _mean([r.busbw_norm for r in rs])
    p99 = _mean([r.p99_us for r in rs])
    per_rep = [objective_of(t, cfg) for t in ts]
    scalar = _mean(per_rep) or 0.0
    if cfg.mode == "multi":
        values: tuple[float, ...] = (norm if norm is not None else 0.0,
                                     p99 if p99 is not None else math.inf)
    else:
        values = (scalar,)
    return Score(scalar=scalar, per_replicate=tuple(x or 0.0 for x in per_rep),
                 busbw_term=_mean([t.busbw for t in ts]),
                 latency_term=_mean([t.latency for t in ts]),
                 pfc_term=float(np.mean([t.pfc for t in ts])),
                 busbw_ratio=_mean([t.busbw_ratio for t in ts]),
                 tenant_ratio=_mean([t.tenant_ratio for t in ts]), busbw_norm=norm,
                 p99_us=p99, pause_us_per_s=float(np.mean([r.pause_us_per_s for r in rs])),
                 values=values, constraints=cons, broken=tuple(broken))


def log2_percent(log2_ratio: float) -> float:
    """A paired log2 ratio as the % change of the metric it is the ratio of."""
    return (2.0 ** log2_ratio - 1.0) * 100.0


def t_interval(xs: Sequence[float], *, level: float = 0.95,
               comparisons: int = 1) -> tuple[float, float]:
    """Student-t interval of the mean of paired differences, Bonferroni-corrected for
    ``comparisons`` candidates judged on the same data (valid at small n, unlike a percentile
    bootstrap). Fewer than two differences: an unbounded interval, which confirms nothing."""
    from scipy import stats

    x = np.asarray(xs, dtype=float)
    if x.size < 2:
        return -math.inf, math.inf
    alpha = (1 - level) / max(comparisons, 1)
    half = float(stats.t.ppf(1 - alpha / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    mean = float(x.mean())
    return mean - half, mean + half


def pareto_front(points: list[tuple[int, tuple[float, ...]]],
                 dirs: list[str]) -> list[int]:
    """Ids of the non-dominated points (``points`` are ``(id, values)``), in input order."""
    sign = [1.0 if d == "maximize" else -1.0 for d in dirs]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        ge = all(s * x >= s * y for s, x, y in zip(sign, a, b, strict=True))
        gt = any(s * x > s * y for s, x, y in zip(sign, a, b, strict=True))
        return ge and gt

    return [i for i, v in points if not any(dominates(w, v) for j, w in points if j != i)]
