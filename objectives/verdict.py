"""The confirmation's verdict in the operator's units: per-metric paired effects and the rule.

At the end of a study the top candidates and the baseline are measured interleaved on fresh
placements (the same placement for the baseline and every candidate in a round). From those
measurements alone, ``judge`` gives each candidate:

* an ``Effect`` per metric: busbw (GB/s, mix-weighted over the collectives), probe p99 (µs), PFC
  pause (µs per second per NIC port) and the worst RoCE-class tenant's goodput (Gb/s), each with
  its % change, a 95 % interval and the baseline and candidate values on every placement;
* the guardrails it broke, placement by placement (``objectives.score``);
* whether it is confirmed, and at what price.

Intervals are Student-t intervals of the mean paired difference (log2 ratios for busbw, p99 and
tenant goodput, differences for PFC pause), Bonferroni-corrected for the number of candidates
judged on the same placements: the best of three is not a free pick.

The rule. A candidate that was stopped by a safety limit, or that broke any guardrail on any
placement, is not confirmed. Otherwise, when the baseline meets every guardrail, a candidate is
confirmed when its primary metric's interval lies wholly on the good side of 0 (``scalar``
mode: the composite score's interval; ``multi``: busbw's or p99's, the other within its
guardrail). When the baseline itself breaks a guardrail (PFC pause over its limit on some
placement), a candidate that meets every guardrail on every placement is confirmed *at its
price*: the busbw change, with its interval, that buys it. ``price`` states every trade a
candidate makes (what it clearly gives up, for what it clearly gains). The winner is the
confirmed candidate with the best primary effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from objectives.measurement import Measurement
from objectives.score import (
    GUARDRAILS,
    Raw,
    ScoreConfig,
    Terms,
    break_text,
    busbw_gbytes_per_s,
    log2_percent,
    paired_terms,
    raw,
    t_interval,
)

MIN_PAIRS = 5  # fewer confirmation placements cannot support an interval worth stating
METRICS = {"busbw": "GB/s", "p99_us": "µs", "pause_us_per_s": "µs/s",
           "tenant_goodput": "Gb/s"}


@dataclass(frozen=True)
class Effect:
    """One metric, candidate against baseline on the same placements."""

    metric: str
    unit: str
    change_percent: float | None  # None: no data, or a change from a baseline of 0
    ci95_low: float | None
    ci95_high: float | None
    baseline_mean: float | None
    candidate_mean: float | None
    per_placement: list[dict[str, float]] = field(default_factory=list)

    def spread(self, side: str) -> tuple[float, float] | None:
        """(median, worst) of one side over the placements (worst: the highest for p99 and
        pause, the lowest otherwise)."""
        xs = [p[side] for p in self.per_placement]
        if not xs:
            return None
        worst = max(xs) if self.metric in ("p99_us", "pause_us_per_s") else min(xs)
        return float(np.median(xs)), worst


def _pct_of(log2_ratio: float) -> float | None:
    """A log2 ratio as a % change; None for an unbounded end (fewer than two pairs)."""
    return log2_percent(log2_ratio) if math.isfinite(log2_ratio) else None


def _ratio_effect(metric: str, pairs: list[tuple[int, float | None, float | None]],
                  comparisons: int) -> Effect:
    """Change from paired log2 ratios (both sides > 0)."""
    rows = [(r, b, c) for r, b, c in pairs if b is not None and c is not None]
    logs = [math.log2(max(c, 1e-12) / b) for _, b, c in rows if b > 0]
    lo, hi = t_interval(logs, comparisons=comparisons)
    mean = float(np.mean(logs)) if logs else None
    return Effect(metric, METRICS[metric],
                  log2_percent(mean) if mean is not None else None, _pct_of(lo), _pct_of(hi),
                  float(np.mean([b for _, b, _ in rows])) if rows else None,
                  float(np.mean([c for _, _, c in rows])) if rows else None,
                  [{"replicate": r, "baseline": b, "candidate": c} for r, b, c in rows])


def _difference_effect(metric: str, pairs: list[tuple[int, float, float]],
                       comparisons: int) -> Effect:
    """Change from paired differences, relative to the baseline's mean (PFC pause is often 0,
    where no ratio exists)."""
    d = [c - b for _, b, c in pairs]
    lo, hi = t_interval(d, comparisons=comparisons)
    base = float(np.mean([b for _, b, _ in pairs])) if pairs else 0.0
    mean = float(np.mean(d)) if d else 0.0

    def rel(x: float) -> float | None:
        if base > 0:
            return x / base * 100
        return 0.0 if x == 0 else None

    lo = max(lo, -base) if base > 0 else lo  # no port pauses less than never
    return Effect(metric, METRICS[metric], rel(mean) if d else None,
                  rel(lo) if d and math.isfinite(lo) else None,
                  rel(hi) if d and math.isfinite(hi) else None, base if pairs else None,
                  float(np.mean([c for _, _, c in pairs])) if pairs else None,
                  [{"replicate": r, "baseline": b, "candidate": c} for r, b, c in pairs])


def _tenant_sum(x: Raw) -> float | None:
    return sum(x.tenants.values()) if x.tenants else None


def effects(base: Sequence[Measurement], cand: Sequence[Measurement], cfg: ScoreConfig,
            comparisons: int = 1) -> dict[str, Effect]:
    """The four per-metric effects of ``cand`` against ``base`` (paired by replicate)."""
    bmap = {m.replicate: m for m in base}
    rows = [(m, bmap[m.replicate]) for m in cand if m.replicate in bmap]
    rb = [(m.replicate, raw(m, cfg.priority), raw(b, cfg.priority)) for m, b in rows]
    busbw = [(m.replicate, busbw_gbytes_per_s(b), busbw_gbytes_per_s(m)) for m, b in rows]
    out = {
        "busbw": _ratio_effect("busbw", busbw, comparisons),
        "p99_us": _ratio_effect("p99_us", [(r, b.p99_us, c.p99_us) for r, c, b in rb],
                                comparisons),
        "pause_us_per_s": _difference_effect(
            "pause_us_per_s", [(r, b.pause_us_per_s, c.pause_us_per_s) for r, c, b in rb],
            comparisons),
        "tenant_goodput": _ratio_effect(
            "tenant_goodput", [(r, _tenant_sum(b), _tenant_sum(c)) for r, c, b in rb],
            comparisons)}
    # busbw's change is the mix-weighted log2 ratio the study maximises (per collective), not
    # the ratio of the mix-weighted means: recompute its mean and interval from the terms.
    logs = [t.busbw for _, t, _, _ in paired_terms(cand, base, cfg) if t.busbw is not None]
    if logs:
        lo, hi = t_interval(logs, comparisons=comparisons)
        e = out["busbw"]
        out["busbw"] = Effect(e.metric, e.unit, log2_percent(float(np.mean(logs))),
                              _pct_of(lo), _pct_of(hi), e.baseline_mean, e.candidate_mean,
                              e.per_placement)
    return out


@dataclass(frozen=True)
class CandidateCheck:
    """One candidate's paired confirmation against the baseline (stored with the study)."""

    trial: int
    diffs: list[float]  # the primary metric's paired log2 differences, one per placement
    improvement_percent: float  # the primary metric's mean change, % (better is positive)
    ci95_low: float  # its corrected 95 % interval, %
    ci95_high: float
    problem: str  # why it is not confirmed ("" = nothing wrong)
    confirmed: bool
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> Effect
    price: str = ""  # every trade it makes, in the metrics' units (``trade_text``)
    primary: str = "busbw"

    def effect(self, metric: str) -> Effect | None:
        e = self.effects.get(metric)
        return Effect(**e) if e else None


def _primary_logs(ts: list[tuple[int, Terms, Raw, Raw]], cfg: ScoreConfig) -> list[float]:
    """The primary metric's per-placement log2 change, signed so that positive is better."""
    if cfg.primary == "p99_us":
        return [-t.p99_log2 for _, t, _, _ in ts if t.p99_log2 is not None]
    return [t.busbw for _, t, _, _ in ts if t.busbw is not None]


def _breaks(ts: list[tuple[int, Terms, Raw, Raw]], cfg: ScoreConfig) -> list[str]:
    """Each guardrail broken on some placement, on its worst placement, in its own unit."""
    out = []
    for code in GUARDRAILS:
        bad = [(t.margins[code], rep, t, r, b) for rep, t, r, b in ts
               if t.margins.get(code, 0.0) > 0]
        if bad:
            m, rep, t, r, b = max(bad, key=lambda x: x[0])
            n = len(bad)
            out.append(f"{code}: {break_text(code, t, r, b, cfg.guardrails)} on placement {rep}"
                       + (f" (and {n - 1} more)" if n > 1 else ""))
    return out


def _pause_text(us_per_s: float | None) -> str:
    return "-" if us_per_s is None else f"{us_per_s / 1e4:.2g} %"


def judge(base: Sequence[Measurement], cands: Mapping[int, Sequence[Measurement]],
          problems: Mapping[int, str], cfg: ScoreConfig) -> list[CandidateCheck]:
    """Every candidate's check (see the module docstring). ``base`` and each candidate's list
    are measured on the same placements (``Measurement.replicate``); ``problems`` holds a
    candidate's safety stop or failure ("" or missing: none)."""
    k = max(len(cands), 1)
    base_ts = paired_terms(base, base, cfg)
    base_breaks = _breaks(base_ts, cfg)
    out = []
    for number, ms in cands.items():
        problem = problems.get(number, "")
        if not ms:
            out.append(CandidateCheck(number, [], 0.0, 0.0, 0.0, problem or "no repeat", False,
                                      primary=cfg.primary))
            continue
        ts = paired_terms(ms, base, cfg)
        logs = _primary_logs(ts, cfg)
        lo, hi = t_interval(logs, comparisons=k)
        mean = float(np.mean(logs)) if logs else 0.0
        eff = effects(base, ms, cfg, k)
        broken = _breaks(ts, cfg)
        if not problem and broken:
            problem = "guardrail " + "; ".join(broken)
        if not problem and len(logs) < 2:
            problem = "fewer than 2 paired repeats: no interval"
        confirmed = False
        if not problem:
            if base_breaks:  # the candidate meets what the baseline breaks: at its price
                confirmed = True
            else:
                confirmed, problem = _beats(ts, lo, hi, cfg, k)
        price = trade_text(eff, base_breaks)
        out.append(CandidateCheck(
            number, logs, log2_percent(mean), log2_percent(lo) if math.isfinite(lo) else -100.0,
            log2_percent(hi) if math.isfinite(hi) else math.inf, problem, confirmed,
            {m: asdict(e) for m, e in eff.items()}, price, cfg.primary))
    return out


def _beats(ts: list[tuple[int, Terms, Raw, Raw]], lo: float, hi: float, cfg: ScoreConfig,
           k: int) -> tuple[bool, str]:
    """(confirmed, why not) for a candidate against a baseline that meets every guardrail;
    ``lo``/``hi`` bound the primary metric's corrected interval (log2, better is positive)."""
    if cfg.mode == "scalar":
        s_lo, s_hi = t_interval([t.scalar for _, t, _, _ in ts], comparisons=k)
        if s_lo > 0:
            return True, ""
        return False, (f"composite score interval [{s_lo:+.3f}, {s_hi:+.3f}] does not lie "
                       "above 0")
    if cfg.mode == "multi":
        p99 = [-t.p99_log2 for _, t, _, _ in ts if t.p99_log2 is not None]
        p_lo, _ = t_interval(p99, comparisons=k)
        if lo > 0 or p_lo > 0:
            return True, ""
        return False, "neither the busbw nor the p99 interval lies wholly on the better side"
    if lo > 0:
        return True, ""
    name = "busbw" if cfg.primary == "busbw" else "p99"
    return False, (f"{name} interval [{log2_percent(lo):+.1f}, {log2_percent(hi):+.1f}] % "
                   "does not lie above 0" if math.isfinite(lo) else f"{name}: no interval")


# Which way is worse for each metric's change.
_WORSE_WHEN = {"busbw": -1, "p99_us": +1, "pause_us_per_s": +1, "tenant_goodput": -1}
_LABEL = {"busbw": "busbw", "p99_us": "probe p99", "pause_us_per_s": "PFC pause",
          "tenant_goodput": "tenant goodput"}


def _clearly(e: Effect, sign: int) -> bool:
    """Is the change's whole interval on the side ``sign`` (+1 up, -1 down) of 0?"""
    lo, hi = e.ci95_low, e.ci95_high
    if lo is None or hi is None:
        return False
    return lo > 0 if sign > 0 else hi < 0


def worse_on(e: Effect) -> int:
    """On how many placements the candidate is worse than the baseline (by more than 1 %)."""
    sign = _WORSE_WHEN[e.metric]
    return sum(1 for p in e.per_placement
               if sign * (p["candidate"] - p["baseline"]) > 0.01 * abs(p["baseline"]))


def trade_text(eff: dict[str, Effect], base_breaks: list[str]) -> str:
    """Every trade the candidate makes, in each metric's unit: what it clearly gives up (or
    gives up on most placements) for what it clearly gains, and the guardrail it fixes when the
    baseline breaks one ("" = none)."""
    def said(m: str, e: Effect) -> str:
        if m == "pause_us_per_s":
            return (f"PFC pause {_pause_text(e.baseline_mean)} → "
                    f"{_pause_text(e.candidate_mean)} of the time")
        return f"{_LABEL[m]} {_pct(e)}"

    fixed = sorted({b.split(":")[0] for b in base_breaks})
    worse = [said(m, e) for m, e in eff.items() if _clearly(e, _WORSE_WHEN[m])]
    worse += [f"{_LABEL[m]} on {worse_on(e)} of {len(e.per_placement)} placements"
              for m, e in eff.items() if not _clearly(e, _WORSE_WHEN[m])
              and 2 * worse_on(e) > len(e.per_placement)]
    better = [said(m, e) for m, e in eff.items() if _clearly(e, -_WORSE_WHEN[m])
              and not (m == "pause_us_per_s" and "pfc_pause" in fixed)]
    fix = ""
    if fixed:
        pause = eff["pause_us_per_s"]
        what = (f"PFC pause from {_pause_text(pause.baseline_mean)} of the time to "
                f"{_pause_text(pause.candidate_mean)}" if fixed == ["pfc_pause"]
                else f"the {', '.join(fixed)} guardrail the baseline breaks")
        fix = f"brings {what}, on every placement"
        bw = eff["busbw"]
        if not _clearly(bw, +1):
            fix += f", at busbw {_pct(bw)}"
    if not worse:
        return fix
    gains = ", ".join(better) or "no clear gain"
    return f"gives up {', '.join(worse)} for {gains}" + (f"; {fix}" if fix else "")


def _pct(e: Effect) -> str:
    if e.change_percent is None:
        return "-"
    ci = ""
    if e.ci95_low is not None and e.ci95_high is not None:
        ci = f" [{e.ci95_low:+.1f}, {e.ci95_high:+.1f}]"
    return f"{e.change_percent:+.1f} %{ci}"


def winner_of(checks: list[CandidateCheck]) -> int | None:
    """The confirmed candidate with the best primary effect (None: nothing confirmed)."""
    ok = [c for c in checks if c.confirmed]
    return max(ok, key=lambda c: c.improvement_percent).trial if ok else None


def winner_line(c: CandidateCheck) -> str:
    """The winner's effects in one line, each metric in its own unit, trades stated."""
    parts = []
    bw, p99, pause, ten = (c.effect(m) for m in METRICS)
    if bw is not None and bw.change_percent is not None:
        parts.append(f"busbw {_pct(bw)}")
    if pause is not None and pause.baseline_mean is not None:
        parts.append(f"PFC pause {_pause_text(pause.baseline_mean)} → "
                     f"{_pause_text(pause.candidate_mean)} of the time")
    if p99 is not None and p99.per_placement:
        (bm, bw_), (cm, cw) = p99.spread("baseline"), p99.spread("candidate")  # type: ignore
        parts.append(f"p99 worst placement {bw_:.3g} → {cw:.3g} µs, median {bm:.3g} → "
                     f"{cm:.3g} µs (worse on {worse_on(p99)} of {len(p99.per_placement)})")
    if ten is not None and ten.change_percent is not None and ten.per_placement:
        worst = min(p["candidate"] / p["baseline"] for p in ten.per_placement
                    if p["baseline"] > 0)
        parts.append(f"tenant {ten.change_percent:+.0f} % (worst {(worst - 1) * 100:+.0f} %)")
    return "; ".join(parts)
