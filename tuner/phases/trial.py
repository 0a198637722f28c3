"""One searched trial: propose, check, screen, apply + measure, judge, score, tell, log.

1. the params become knob values (``tuner.space``);
2. ``safety.limits.check_proposal``: a proposal breaking a static rule is never applied; it is
   told to Optuna as PRUNED with verdict ``rejected:<code>`` and a ``static_limits`` constraint;
3. the twin screen (``tuner.screen``) may skip a proposal it predicts to break a guardrail;
4. one guarded change (``tuner.transaction``): journal, apply, read back, measure each replicate
   under a live ``safety.monitor.LiveMonitor`` (``SafetyAbort`` => ``rolled_back``), judge it
   post hoc by the same rules and report the running paired score to the pruner, which may stop
   a clearly worse trial early (``pruned:early_stop``); a trial that would go to the
   confirmation is measured on further study placements first (``budget.candidate_placements``:
   intensification, as in SMAC), so that a guardrail it meets only on the study's first few
   placements is caught before it takes a confirmation slot; then the verified restore;
5. score against the baseline replicate by replicate (``objectives.score``), tell Optuna the
   value and every constraint (a rolled-back trial carries ``safety``), log the MLflow run.

``finish`` (tell + log) and ``measure`` are shared with the baseline and confirmation phases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from objectives.measurement import Measurement
from objectives.score import Score, score
from safety.limits import PfcThreshold, check_proposal, describe
from safety.monitor import LiveMonitor, judge
from tuner import optuna_io, study_store
from tuner import study as studies
from tuner.errors import ApplyError, MeasurementError, ProtectionLost, SafetyAbort
from tuner.settings import Settings
from tuner.signals import GuardedMonitor
from tuner.study import TrialOutcome
from tuner.tracking import trial_metrics

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.loop import StudyRunner

# The constraint told to Optuna for a proposal that was refused, screened or rolled back: worse
# than any measured trial's guardrails (each bounded to < 1), so the sampler ranks what it could
# not even measure last and does not drift towards it.
NEVER_KEPT = 10.0


def settled(verdict: str) -> tuple[Any, dict[str, float]]:
    """(Optuna state, constraints) of a trial that ended without a feasible score."""
    if verdict.startswith("rolled_back"):
        return optuna_io.PRUNED, {"safety": NEVER_KEPT}
    if verdict.startswith("pruned"):
        return optuna_io.PRUNED, {}
    return optuna_io.FAIL, {}


def run(ctx: StudyRunner, asked: optuna_io.Asked, role: str) -> TrialOutcome:
    """The trial ``asked`` (``role``: ``proposal`` or ``warm:<label>``), told and logged."""
    assert ctx.desc is not None and ctx.tx is not None
    values = ctx.space.values(asked.params, ctx.baseline_values)
    violations = check_proposal(values, pfc=PfcThreshold.from_facts(ctx.desc.facts),
                                line_rate_mbps=int(ctx.desc.nic_gbps * 1000),
                                limits=ctx.exp.safety)
    if violations:
        return finish(ctx, asked, verdict=f"rejected:{violations[0].code}", values=values,
                      state=optuna_io.PRUNED, role=role,
                      constraints={"static_limits": NEVER_KEPT}, detail=describe(violations))
    try:
        settings = Settings.uniform(ctx.desc.canary_switches, ctx.desc.canary_nics, values)
    except ValueError as exc:  # a model invariant check_proposal does not know about
        return finish(ctx, asked, verdict="rejected:invalid_settings", values=values,
                      state=optuna_io.PRUNED, role=role,
                      constraints={"static_limits": NEVER_KEPT}, detail=str(exc))
    given = {f"warm:{label}" for label, _ in ctx.warm}  # retune: always re-measured
    if ctx.screen is not None and role not in given:
        predicted = ctx.screen.verdict(values)
        if predicted is not None:
            return finish(ctx, asked, verdict=predicted[0], values=values,
                          state=optuna_io.PRUNED, role=role,
                          constraints={"screen": NEVER_KEPT}, detail=predicted[1])
    verdict, detail = "ok", ""
    ms: list[Measurement] = []
    change = None
    try:
        with ctx.tx.applied(settings, asked.number) as change:
            verdict, detail = measure_replicates(ctx, asked, ms, change.counters_before)
            if verdict == "ok" and would_confirm(ctx, asked, values, ms, role):
                verdict, detail = measure_replicates(
                    ctx, asked, ms, change.counters_before,
                    range(len(ms), placements(ctx)), intensify=True)
    except ApplyError as exc:
        verdict, detail = "failed:apply", str(exc)
    except ProtectionLost as exc:  # the canary stopped being ours: never scored
        ms.clear()
        verdict, detail = "failed:protection_lost", str(exc)
    except MeasurementError as exc:
        verdict, detail = "failed:measurement", str(exc)
    except KeyboardInterrupt:
        tell_interrupted(ctx, asked, values)
        raise
    extra = {"restore_s": change.restore_s if change else 0.0}
    whole = [m for m in ms if m.collectives or m.latency is not None]  # not a cut-off one
    sc = score(whole, ctx.baseline_ms, ctx.cfg) if whole else None
    if verdict == "ok" and sc is not None:
        broken = sc.violations()
        if broken:
            verdict = f"infeasible:{broken[0][0]}"
            detail = "; ".join(f"{code}: {text}" for code, text in broken)
        return finish(ctx, asked, verdict=verdict, values=values, state=optuna_io.COMPLETE,
                      ms=ms, sc=sc, role=role, extra_metrics=extra, detail=detail)
    state, cons = settled(verdict)
    return finish(ctx, asked, verdict=verdict, values=values, state=state, ms=ms, sc=sc,
                  constraints=cons, role=role, extra_metrics=extra, detail=detail)


def placements(ctx: StudyRunner) -> int:
    """How many study placements a would-be candidate is measured on: up to
    ``candidate_placements``, as far as the baseline was measured on them."""
    return max(ctx.repeats, min(candidate_placements(ctx), len(ctx.baseline_ms)))


def candidate_placements(ctx: StudyRunner) -> int:
    """``budget.candidate_placements``, or 0 (off) where the backend cannot vary placements
    (an SSH canary of two hosts): there the extra measurements would repeat the one placement
    the trial was measured on, canary time that judges no guardrail anywhere new."""
    fixed = ctx.desc is not None and ctx.desc.facts.get("placements") == "fixed"
    return 0 if fixed else ctx.exp.budget.candidate_placements


def would_confirm(ctx: StudyRunner, asked: optuna_io.Asked, values: dict[str, int],
                  ms: list[Measurement], role: str) -> bool:
    """Whether the trial measured so far would go to the confirmation: it meets every
    guardrail and is a warm start, or ranks among the top candidates as the end will."""
    sc = score(ms, ctx.baseline_ms, ctx.cfg)
    if len(ms) >= placements(ctx) or not sc.feasible:
        return False
    if role.startswith("warm:"):
        return True
    so_far = TrialOutcome(number=asked.number, state="COMPLETE", verdict="ok",
                          values=values, score=sc.scalar, objective=sc.values,
                          role=role)
    return studies.would_be_candidate(ctx.study, ctx.exp.budget.confirm_top_k, so_far)


def measure_replicates(ctx: StudyRunner, asked: optuna_io.Asked, ms: list[Measurement],
                       c0: Counters, replicates: range | None = None, *,
                       intensify: bool = False) -> tuple[str, str]:
    """Measure the trial's ``replicates`` (default: the study's paired ones) into ``ms``;
    (verdict, detail). Stops at the first safety violation (live or post hoc), when the
    pruner says the trial is clearly worse, or (``intensify``) at the first placement that
    breaks a guardrail: the trial is then no candidate, and the rest would not change that.
    """
    for r in (range(ctx.repeats) if replicates is None else replicates):
        try:
            m = measure(ctx, r)
        except SafetyAbort as exc:
            c1 = ctx.cluster.counters()
            ms.append(Measurement(counters_before=c0, counters_after=c1, replicate=r,
                                  duration_s=max(c1.taken_at_s - c0.taken_at_s, 0.0),
                                  notes=[f"aborted by the live monitor: {exc}"]))
            return f"rolled_back:{exc.reason}", exc.detail
        ms.append(m)
        found = judge(m, ctx.exp.safety, ctx.window_s)
        if found:
            return f"rolled_back:{found[0].code}", describe(found)
        if intensify:
            if not score(ms, ctx.baseline_ms, ctx.cfg).feasible:
                break
            continue
        if r + 1 < ctx.repeats and ctx.pruner() is not None:
            running = score(ms, ctx.baseline_ms, ctx.cfg).scalar
            if optuna_io.report(asked, running, r):
                left = ctx.repeats - r - 1
                ctx.saved_s += left * float(np.mean([x.duration_s for x in ms]))
                return "pruned:early_stop", (f"running paired score {running:+.3f} after "
                                             f"{r + 1} of {ctx.repeats} replicates")
    return "ok", ""


def measure(ctx: StudyRunner, replicate: int, *, abort: bool = True) -> Measurement:
    """One replicate under a live monitor (``abort=False``: only record, the baseline);
    the monitor's pause samples ride along for the post-hoc rule."""
    monitor = LiveMonitor(ctx.exp.safety, ctx.window_s, abort=abort, poll_s=ctx.poll_s)
    m = ctx.cluster.measure(ctx.exp.workload,
                            GuardedMonitor(monitor, ctx.guard, ctx.exp.safety.poll_interval_s),
                            replicate=replicate)
    return m.model_copy(update={"pause_series": monitor.series})


def stripped(m: Measurement) -> Measurement:
    """A measurement without its raw tool outputs (what the study database keeps)."""
    return m.model_copy(update={"raw": {}})


def finish(ctx: StudyRunner, asked: optuna_io.Asked, *, verdict: str, values: dict[str, int],
           state: Any, ms: list[Measurement] | None = None, sc: Score | None = None,
           constraints: dict[str, float] | None = None,
           extra_metrics: dict[str, float] | None = None, role: str = "proposal",
           detail: str = "") -> TrialOutcome:
    """Save the trial's measurements, tell Optuna, log the nested MLflow run."""
    ms = ms or []
    metrics: dict[str, float] = {}
    attrs: dict[str, Any] = {"verdict": verdict, "values": values, "role": role,
                             "replicates": len(ms)}
    if detail:
        attrs["detail"] = detail[:1000]
    if ms:
        # Over the paired replicates only: the baseline may hold more, measured just to
        # size ``repeats: auto``, and a mean over other placements is not like with like.
        per = [trial_metrics(m) for m in (ms[:ctx.repeats or None] if role == "baseline"
                                          else ms)]
        metrics.update({k: float(np.mean([p[k] for p in per if k in p])) for k in per[0]})
        attrs["measurement_path"] = _save(ctx, asked.number, ms)
    cons = dict(constraints or {})
    if sc is not None:
        metrics.update(sc.metrics())
        attrs["score"] = sc.scalar
        attrs["per_replicate"] = list(sc.per_replicate)
        cons = {**sc.constraints, **cons}
    metrics.update({f"constraint_{k}": v for k, v in cons.items()})
    metrics.update(extra_metrics or {})
    attrs["metrics"] = metrics
    if ctx.tracker.enabled:
        attrs["artifact_dir"] = _trial_files(ctx, asked.number, values, ms[0] if ms else None)
    tell_values = sc.values if sc is not None and state == optuna_io.COMPLETE else None
    with ctx.guard.shield():  # a local, quick write: never half-done
        optuna_io.tell(ctx.study, asked, state=state, values=tell_values,
                       constraints=cons, attrs=attrs)
    twin_trials = getattr(ctx.study.sampler, "twin_trials", None)
    if twin_trials is not None:  # counted apart: the canary budget counts the canary only
        study_store.count_twin_trials(ctx.study, ctx.policy.twin_key, twin_trials)
    # Not shielded: a hung tracking server must stay interruptible. The canary is already
    # back on the baseline here, and a missed run is back-filled from Optuna later.
    from tuner.phases.tracking import record

    ctx.tracker.log_trial(record(ctx, asked.number, state.name, study_store.Tags(**attrs),
                                 asked.params))
    return TrialOutcome(number=asked.number, state=state.name, verdict=verdict,
                        values=values, score=sc.scalar if sc else None,
                        objective=tell_values, metrics=metrics,
                        is_baseline=role == "baseline", role=role, constraints=cons)


def tell_interrupted(ctx: StudyRunner, asked: optuna_io.Asked, values: dict[str, int]) -> None:
    with ctx.guard.shield():
        optuna_io.tell(ctx.study, asked, state=optuna_io.FAIL,
                       attrs={"verdict": "interrupted", "values": values})


def _save(ctx: StudyRunner, number: int, ms: list[Measurement]) -> str | None:
    """Every replicate's measurement as ``trial-NNNN.json`` (replicate 0) and
    ``trial-NNNN-rK.json``; returns the first one's path."""
    if not ms:
        return None
    ctx.trial_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for m in ms:
        suffix = "" if m is ms[0] else f"-r{m.replicate}"
        path = ctx.trial_dir / f"trial-{number:04d}{suffix}.json"
        path.write_text(m.model_dump_json(indent=1), encoding="utf-8")
        paths.append(str(path))
    return paths[0]


def _trial_files(ctx: StudyRunner, number: int, values: dict[str, int],
                 m: Measurement | None) -> str | None:
    """The nested run's extra artifacts (settings diff, raw outputs, sim time series)."""
    try:
        from tuner.plots import write_trial_files

        return str(write_trial_files(ctx.trial_dir / f"trial-{number:04d}", values,
                                     ctx.baseline_values, m))
    except Exception as exc:  # a plot must never cost a trial
        ctx.tracker._fail(f"trial {number} artifacts", exc)
        return None
