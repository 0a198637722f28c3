"""Trial 0 and its drift checks: the canary as it is, measured on the study's paired replicates.

Trial 0 is measured on the placements and seeds every later trial is measured on
(``budget.repeats``; ``auto`` chooses their number from the baseline's own noise) and on the
further placements a would-be candidate is measured on (``budget.candidate_placements``). Every
``budget.baseline_every`` trials one replicate of the baseline is measured again (drift).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from objectives.measurement import Measurement
from objectives.score import ScoreConfig, score
from safety.monitor import storm_window_s
from tuner import optuna_io, study_store
from tuner.errors import MeasurementError, SafetyAbort
from tuner.phases.trial import (
    candidate_placements,
    finish,
    measure,
    stripped,
    tell_interrupted,
)
from tuner.study import TrialOutcome
from tuner.warm_starts import warm_starts

if TYPE_CHECKING:
    from safety.limits import SafetyLimits
    from tuner.loop import StudyRunner

AUTO_REPLICATES = 5  # baseline replicates measured to size ``repeats: auto``


def repeats_for(noise_sd: float, *, detectable: float = 0.05, most: int = 6) -> int:
    """Replicates per trial so that the standard error of a trial's mean score is half the
    smallest effect worth detecting (``detectable`` log2 units of the objective, ~3.5 % busbw):
    ``K = ceil((2 sd / detectable)**2)``, between 2 (so early stopping has a step) and ``most``.
    """
    if not math.isfinite(noise_sd) or noise_sd <= 0:
        return 2
    return max(2, min(most, math.ceil((2 * noise_sd / detectable) ** 2)))


def noise_of(ms: list[Measurement], cfg: ScoreConfig) -> dict[str, float]:
    """The spread of the baseline across replicates: coefficient of variation of each metric,
    and ``score_sd``, the standard deviation of one replicate's score against the others."""
    from objectives.score import raw

    out: dict[str, float] = {}
    rs = [raw(m, cfg.priority) for m in ms]
    for name, xs in (("busbw_norm", [r.busbw_norm for r in rs]),
                     ("p99_us", [r.p99_us for r in rs]),
                     ("pause_us_per_s", [r.pause_us_per_s for r in rs])):
        vals = np.array([x for x in xs if x is not None], dtype=float)
        if vals.size >= 2 and vals.mean() != 0:
            out[f"cv_{name}"] = float(vals.std(ddof=1) / abs(vals.mean()))
    if len(ms) >= 2:  # every replicate scored against every other one: the unpaired spread
        pair = [score([a], [b.model_copy(update={"replicate": a.replicate})], cfg).scalar
                for a in ms for b in ms if a is not b]
        out["score_sd"] = float(np.std(pair, ddof=1) / math.sqrt(2))
    return out


def window_for(limits: SafetyLimits, ms: list[Measurement], repeats: int) -> float:
    """The storm detection window sized from the study's paired placements only (the rest are
    measured for would-be candidates)."""
    durations = [m.duration_s for m in ms[:repeats or None] if m.duration_s > 0]
    return storm_window_s(limits, float(np.mean(durations)) if durations else None)


def adopt(ctx: StudyRunner, ms: list[Measurement], repeats: int) -> None:
    """Score every later trial against ``ms`` (a baseline measured now or loaded)."""
    ctx.baseline_ms = ms
    ctx.repeats = repeats
    ctx.window_s = window_for(ctx.exp.safety, ms, repeats)


def enqueue(ctx: StudyRunner) -> None:
    """Enqueue trial 0 (and the warm starts) on a new study; load its replicates on resume.
    A worker's trial 0 is its slice's (stored under the slice), never this canary's."""
    trials = optuna_io.trials(ctx.study)
    done = [t for t in trials if study_store.tags(t).role == "baseline"
            and study_store.tags(t).slice is None and t.state.name == "COMPLETE"]
    if done:
        ms, repeats = study_store.baseline(ctx.study)
        adopt(ctx, ms, repeats or len(ms) or 1)
        return
    if any(t.state.name == "WAITING" and study_store.tags(t).role == "baseline"
           for t in trials):
        return
    optuna_io.enqueue(ctx.study, ctx.space.params_of(ctx.baseline_values), "baseline")
    enqueue_warm_starts(ctx)


def enqueue_warm_starts(ctx: StudyRunner) -> None:
    """Each starting point (knob values over the baseline's) once, as ``warm:<label>``: the
    given ones (``retune``), then the known-good ones for this fabric."""
    points = list(ctx.warm)
    if ctx.exp.search.warm_starts:
        assert ctx.desc is not None
        points += [(w.label, {"kmin_bytes": w.kmin_bytes, "kmax_bytes": w.kmax_bytes,
                              "pmax_percent": w.pmax_percent})
                   for w in warm_starts(ctx.desc.nic_gbps, ctx.kmax_ceiling())]
    seen = {tuple(sorted(ctx.space.params_of(ctx.baseline_values).items()))}
    for label, knobs in points:
        values = dict(ctx.baseline_values, **knobs)
        values.update(ctx.space.fixed)
        params = ctx.space.params_of(values)
        key = tuple(sorted(params.items()))
        if key in seen:  # the baseline (or an earlier point) already is this point
            continue
        seen.add(key)
        optuna_io.enqueue(ctx.study, params, f"warm:{label}")


def run(ctx: StudyRunner, asked: optuna_io.Asked, slice_name: str | None = None) -> TrialOutcome:
    """Measure trial 0, size ``repeats`` from its noise, store it (a worker's under its
    slice, so no worker overwrites the study's) and tell Optuna."""
    values = dict(ctx.baseline_values)
    b = ctx.exp.budget
    try:
        first = AUTO_REPLICATES if b.repeats == "auto" else int(b.repeats)
        ms = [measure(ctx, r, abort=False) for r in range(first)]
        noise = noise_of(ms, ctx.cfg)
        if b.repeats == "auto":
            ctx.repeats = repeats_for(noise.get("score_sd", 0.0), most=b.repeats_max)
        else:
            ctx.repeats = first
        # every placement a trial may be measured on, so each pairs with the baseline's own
        wanted = max(ctx.repeats, candidate_placements(ctx))
        ms += [measure(ctx, r, abort=False) for r in range(len(ms), wanted)]
    except KeyboardInterrupt:
        tell_interrupted(ctx, asked, values)
        raise
    except MeasurementError as exc:
        finish(ctx, asked, verdict="failed:measurement", values=values, state=optuna_io.FAIL,
               role="baseline", detail=str(exc))
        raise MeasurementError(f"baseline measurement failed: {exc}") from exc
    _refuse_starved_cnp_queue(ctx, asked, values, ms)
    adopt(ctx, ms, ctx.repeats)
    study_store.save_baseline(ctx.study, [stripped(m) for m in ms], ctx.repeats, slice_name,
                              noise=noise)
    ctx.on_event("noise", {"repeats": ctx.repeats, "noise": noise,
                           "auto": b.repeats == "auto"})
    sc = score(ms[:ctx.repeats], ms, ctx.cfg)
    return finish(ctx, asked, verdict="baseline", values=values, state=optuna_io.COMPLETE,
                  ms=ms, sc=sc, role="baseline",
                  extra_metrics={f"noise_{k}": v for k, v in noise.items()})


def _refuse_starved_cnp_queue(ctx: StudyRunner, asked: optuna_io.Asked, values: dict[str, int],
                              ms: list[Measurement]) -> None:
    """A CNP queue that drops under the baseline load stops the study (DCQCN would tune
    blind): the trial fails and ``SafetyAbort`` ends the run before any change."""
    from tuner.preflight_facts import cnp_starvation

    bad = [r for r in cnp_starvation(ctx.exp, ctx.cluster, ms) if r.status == "fail"]
    if bad:
        detail = "; ".join(f"{r.target}: {r.evidence}" for r in bad)
        finish(ctx, asked, verdict="failed:cnp_starvation", values=values,
               state=optuna_io.FAIL, role="baseline", detail=detail)
        raise SafetyAbort("cnp_starvation", detail)


def drift_check(ctx: StudyRunner, after_trial: int) -> None:
    """Re-measure the baseline on one replicate and record how far it moved (0 = none)."""
    n = len(study_store.info(ctx.study).drift)
    r = n % max(ctx.repeats, 1)
    m = measure(ctx, r, abort=False)
    sc = score([m], ctx.baseline_ms, ctx.cfg)
    drift = study_store.append_drift(ctx.study, {
        "after_trial": after_trial, "replicate": r, "score": sc.scalar,
        "busbw_norm": sc.busbw_norm, "p99_us": sc.p99_us,
        "pause_us_per_s": sc.pause_us_per_s})
    ctx.on_event("drift", drift[-1])
