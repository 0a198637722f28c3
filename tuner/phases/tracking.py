"""The study's MLflow parent run: opened after trial 0 is set up, every finished trial nested
under it (back-filled from Optuna when tracking was down), closed with the study's numbers."""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from tuner import __version__, optuna_io, study_store
from tuner.plots import TRIAL_COUNTS, kind
from tuner.tracking import TrialRecord, redact

if TYPE_CHECKING:
    from tuner.loop import StudyRunner
    from tuner.study import StudyResult

# A trial's nested run lives seconds from create_run to set_terminated (its artifacts are a
# few files): one still RUNNING after five minutes has no writer left. One whose writer is
# proved gone (``writer_gone``) has none either, however young.
ORPHAN_AFTER_S = 300.0


def writer_gone(run: Any) -> bool:
    """The process that created ``run`` (its ``ecntune.writer`` tag, ``optuna_io.process_owner``)
    provably no longer runs: same host, boot and PID namespace, its pid gone or reused. A run
    without the tag (an older version's), or another machine's, waits for ORPHAN_AFTER_S."""
    try:
        writer = json.loads(run.data.tags.get("ecntune.writer") or "null")
    except ValueError:
        return False
    return isinstance(writer, dict) and optuna_io.owner_gone(writer)


def start(ctx: StudyRunner) -> None:
    """Create the parent run, or re-open the study's (resume; another worker's)."""
    exp = ctx.exp
    assert ctx.desc is not None
    params: dict[str, Any] = {
        "experiment": exp.name, "study": ctx.study_name, "backend": ctx.desc.backend,
        "sampler": exp.sampler.name, "sampler_seed": exp.sampler.seed,
        "mode": exp.objective.mode, "trials_budget": exp.budget.trials,
        "canary_switches": ",".join(ctx.desc.canary_switches),
        "canary_nics": ",".join(ctx.desc.canary_nics),
        **{f"fabric.{k}": v for k, v in ctx.desc.facts.items()},
        **{f"space.{k}": v for k, v in ctx.space.describe().items()
           if not k.startswith("fixed.")},
        **{f"fixed.{k}": v for k, v in ctx.space.fixed.items()},
        **{f"objective.{k}": v for k, v in exp.objective.model_dump().items()},
        **{f"safety.{k}": v for k, v in exp.safety.model_dump().items()},
        **{f"twin.calibrated.{k}": v for k, v in ctx.twin_calibration.items()},
        "screen": exp.screen.mode, **(ctx.screen.describe() if ctx.screen else {}),
    }
    tags = {"ecntune.version": __version__, "ecntune.study": ctx.study_name,
            "ecntune.storage": exp.storage_url, "ecntune.cluster": ctx.desc.name,
            **{f"ecntune.{k}": v for k, v in ctx.lineage.items()}}
    texts = {"experiment.yaml": redact(ctx.exp_yaml),
             "search_space.json": json.dumps(ctx.space.describe(), indent=2),
             "fabric.json": ctx.desc.model_dump_json(indent=2)}
    known = study_store.info(ctx.study).mlflow_parent_run_id
    rid = ctx.tracker.start_study(ctx.study_name, known, params, tags, texts)
    beyond = exp.safety.beyond_bounds()
    if beyond:  # `ecntune --i-know`: on the run as it was started or resumed
        ctx.tracker.tag_study("ecntune.i_know", "; ".join(f"safety.{k}={v}"
                                                          for k, v in beyond.items()))
    if rid and not known:
        study_store.record(ctx.study, mlflow_parent_run_id=rid,
                           mlflow_tracking_uri=exp.tracking_uri)  # for a re-tune


def _trial(run: Any) -> int:
    return int(run.data.tags.get("ecntune.trial", -1))


def backfill(ctx: StudyRunner) -> int:
    """Log finished trials MLflow does not have yet (tracking was down). Returns count.

    The source of truth is MLflow itself: nested runs carry ``ecntune.trial``; every finished
    Optuna trial without one (and this process's to log: ``Policy.backfills``) is logged again
    from its Optuna user attrs.

    A nested run still RUNNING long after it was created, or whose writer is proved gone, lost
    its writer (killed between create_run and set_terminated, or a server that died before
    answering): the back-fill completes that run in place, so that each trial keeps exactly one
    run; one beside a finished run of the same trial is closed as KILLED.
    """
    if ctx.tracker.parent_run_id is None:
        return 0
    try:
        runs = ctx.tracker.nested_runs()
        stale = time.time() * 1000 - ORPHAN_AFTER_S * 1000
        lost = [r for r in runs if r.info.status == "RUNNING"
                and (r.info.start_time < stale or writer_gone(r))]
        logged = {_trial(r) for r in runs if r not in lost}
        orphans: dict[int, str] = {}
        for r in lost:
            if _trial(r) in logged or _trial(r) in orphans:
                ctx.tracker.close_orphan(r.info.run_id)
            else:
                orphans[_trial(r)] = r.info.run_id
    except Exception as exc:  # still down: try again later
        ctx.tracker._fail("back-fill", exc)
        return 0
    n = 0
    for t in optuna_io.trials(ctx.study):
        if (t.state.name not in ("COMPLETE", "PRUNED", "FAIL") or t.number in logged
                or not ctx.policy.backfills(t)):
            continue
        rid = ctx.tracker.log_trial(record(ctx, t.number, t.state.name, study_store.tags(t),
                                           t.params), into=orphans.get(t.number))
        if rid is None:
            break
        n += 1
    return n


def record(ctx: StudyRunner, number: int, state: str, tags: study_store.Tags,
           params: dict[str, Any]) -> TrialRecord:
    """A trial's nested run (from a trial just told, or from its Optuna attrs)."""
    p: dict[str, Any] = dict(tags.values)
    if "kmax_ratio" in params:
        p["kmax_ratio"] = round(float(params["kmax_ratio"]), 4)
    rec = TrialRecord(number=number, state=state, verdict=tags.verdict, params=p,
                      metrics=dict(tags.metrics), measurement_path=tags.measurement_path,
                      detail=tags.detail, artifact_dir=tags.artifact_dir, origin=tags.role)
    if ctx.policy.slice is not None:
        rec.tags["ecntune.slice"] = tags.slice or ctx.policy.slice
    return rec


def study_numbers(res: StudyResult, *, saved_s: float, repeats: int, interrupted: str | None,
                  failed: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """(parent-run metrics, summary.json) of a study's result."""
    counts: dict[str, float] = dict.fromkeys(TRIAL_COUNTS, 0)
    for t in res.trials:
        key = f"trials_{kind(t.verdict)}"
        if key in counts:
            counts[key] += 1
    metrics = dict(counts, canary_time_saved_s=saved_s)
    if res.rolled_back_share is not None:
        metrics["rolled_back_share"] = res.rolled_back_share
    if res.best is not None and res.best.score is not None:
        metrics["best_score"] = res.best.score
        metrics["best_trial"] = res.best.number
    summary: dict[str, Any] = {"study": res.study, "interrupted": interrupted,
                               "failed": failed, "repeats": repeats,
                               "winner": res.winner.number if res.winner else None,
                               "winner_values": res.winner.values if res.winner else None}
    if res.confirmation is not None:
        conf = res.confirmation.summary()
        summary["confirmation"] = conf
        metrics.update({f"confirmed_{k}": float(v) for k, v in conf.items()
                        if isinstance(v, int | float) and not isinstance(v, bool)
                        and v is not None})
        metrics["confirmed"] = float(conf["confirmed"])
        for name, e in conf["effects"].items():  # the winner's effects, each in its unit
            metrics.update({f"confirmed_{name}_{k}": float(e[k])
                            for k in ("change_percent", "ci95_low", "ci95_high")
                            if e.get(k) is not None and math.isfinite(e[k])})
    return metrics, summary


def end(ctx: StudyRunner, interrupted: str | None, failed: bool) -> None:
    """Back-fill, then close the parent run with the study's numbers, the twin's trials, the
    report (this process's to write: ``Policy.concludes``) and the confirmation's files."""
    if ctx.study is None or ctx.tracker.parent_run_id is None:
        return
    backfill(ctx)
    res = ctx.result("-", read_devices=False)
    metrics, summary = study_numbers(res, saved_s=ctx.saved_s, repeats=ctx.repeats,
                                     interrupted=interrupted, failed=failed)
    sampler = ctx.study.sampler
    if getattr(sampler, "twin_trials", None) is not None:
        metrics["twin_trials"] = study_store.twin_trials(ctx.study) or 0
        folder = ctx.results / ctx.study_name / "twin"
        folder.mkdir(parents=True, exist_ok=True)
        name = ctx.policy.twin_key.removeprefix(study_store.TWIN_TRIALS).replace(":", "-")
        (folder / f"trials{name}.json").write_text(json.dumps(sampler.records(), indent=1))
        ctx.tracker.log_dir(folder, "twin")
    if res.confirmation is not None and ctx.summarize is not None:
        try:
            more, summary["retune"] = ctx.summarize(ctx.study)
            metrics.update(more)
        except Exception as exc:  # a summary must never cost the study's run
            summary["retune"] = {"error": f"{type(exc).__name__}: {exc}"}
    status = "FAILED" if failed else ("KILLED" if interrupted else "FINISHED")
    if not interrupted and ctx.policy.concludes:
        log_report(ctx)
    if res.confirmation is not None and res.confirmation.folder:  # every number, auditable
        ctx.tracker.log_dir(res.confirmation.folder, "confirmation")
    ctx.tracker.end_study(metrics, summary, status=status)


def log_report(ctx: StudyRunner) -> None:
    """The study report (HTML, Markdown, plots) into the parent run's ``report/``."""
    try:
        from tuner.report import load, write_report

        files = write_report(
            load(ctx.study_name, ctx.exp.storage_url), ctx.trial_dir / "report",
            lambda done, total: ctx.on_event("report", {"done": done, "total": total}))
        ctx.tracker.log_dir(files.html.parent, "report")
    except Exception as exc:
        ctx.tracker._fail("study report", exc)
