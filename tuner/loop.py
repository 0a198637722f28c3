"""The trial lifecycle: baseline, ask, check, apply, verify, measure, judge, score, tell, log.

Trial 0 measures the canary as it is (the baseline; enqueued into Optuna with the baseline's own
values, so samplers learn from it). Every later trial:

1. ask Optuna; turn the params into knob values (``tuner.space``);
2. ``safety.limits.check_proposal``: a proposal breaking a static rule is never applied; it is
   told to Optuna as PRUNED with verdict ``rejected:<code>``;
3. journal ``begin`` (fsync'd), ``apply`` to the canary, ``read_back`` must equal what was asked;
4. ``measure`` with a live ``safety.monitor.LiveMonitor`` (``SafetyAbort`` => ``rolled_back``);
5. ``safety.monitor.judge`` against the baseline (busbw floor, drops, storms) => ``rolled_back``;
6. restore the snapshot and verify it (``safety.rollback.restore``), journal ``restored``;
7. score (``objectives.score``), tell Optuna (COMPLETE, or PRUNED for a rolled-back trial),
   log the nested MLflow run.

Signals: the first SIGINT/SIGTERM only sets a flag; the running measurement stops at its next
monitor poll, the canary is restored, the in-flight trial is told FAIL (``interrupted``) and
``Interrupted`` is raised. A second signal interrupts at once, except while a restore runs. At
the end, on interrupt or on failure the canary is restored to the baseline; with ``keep_best``
the best trial's settings are re-applied and verified instead (normal end and interrupt only,
never after a failure, never a winner the confirmation repeats did not confirm).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from objectives.measurement import Counters, Measurement
from objectives.score import Score, ScoreConfig, improvement_percent, score
from safety.journal import Journal
from safety.limits import check_proposal
from safety.monitor import LiveMonitor, judge
from safety.rollback import restore
from tuner import __version__, optuna_io
from tuner.errors import (
    ApplyError,
    ConfigError,
    MeasurementError,
    RollbackError,
    SafetyAbort,
    TunerError,
)
from tuner.settings import Settings
from tuner.space import SearchSpace, build_space
from tuner.tracking import Tracker, TrialRecord, redact, trial_metrics

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster, ClusterDescription, Monitor
    from tuner.experiment import Experiment


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the study (the canary was restored first)."""

    def __init__(self, signame: str) -> None:
        super().__init__(f"{signame} received; canary restored")
        self.signame = signame


def build_cluster(exp: Experiment) -> Cluster:
    """The experiment's backend, with its baseline (vendor defaults + ``current:``)."""
    if exp.fabric.backend == "sim":
        from tuner.cluster.sim import SimCluster
        from tuner.cluster.statefile import StateFileCluster

        # The simulated devices' state outlives the process, as real devices' does: a killed
        # run leaves the canary dirty until `ecntune recover` (tuner/cluster/statefile.py).
        return StateFileCluster(
            SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current),
                       name=exp.name),
            exp.results_path / "sim-state.json", exp.results_path / "journal.jsonl")
    if exp.fabric.backend == "ssh":
        from tuner.cluster.deadman import DeadmanCluster
        from tuner.cluster.ssh import SshCluster

        # Commit-confirm: every change is armed with a dead-man timer on its targets.
        return DeadmanCluster(SshCluster.from_fabric(exp.fabric, name=exp.name),
                              exp.safety.deadman_timeout_s)
    raise ConfigError(f"fabric.backend: value {exp.fabric.backend!r} -- not available")


def score_config(exp: Experiment) -> ScoreConfig:
    o = exp.objective
    return ScoreConfig(mode=o.mode, busbw_weight=o.busbw_weight,
                       latency_weight=o.latency_weight, pfc_weight=o.pfc_weight,
                       p99_target_us=o.p99_target_us,
                       pfc_budget_us_per_s=o.pfc_budget_us_per_s,
                       priority=exp.safety.roce_priority)


class SignalGuard:
    """Turns SIGINT/SIGTERM into a flag the loop checks (a second signal raises at once)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.shielded = False
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handler(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        first = self.received is None
        if first:
            self.received = name
        if not first and not self.shielded:
            raise Interrupted(name)

    def check(self) -> None:
        if self.received is not None:
            raise Interrupted(self.received)

    @contextmanager
    def shield(self) -> Iterator[None]:
        prev, self.shielded = self.shielded, True
        try:
            yield
        finally:
            self.shielded = prev


class _GuardedMonitor:
    """Wraps the live safety monitor so a pending signal stops the measurement at its poll."""

    def __init__(self, inner: Monitor | None, guard: SignalGuard, interval_s: float) -> None:
        self.inner = inner
        self.guard = guard
        self.interval_s = inner.interval_s if inner is not None else interval_s

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.guard.check()
        if self.inner is not None:
            self.inner.poll(counters, elapsed_s)


@dataclass
class TrialOutcome:
    number: int
    state: str
    verdict: str
    values: dict[str, int]
    score: float | None = None
    objective: tuple[float, ...] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    is_baseline: bool = False


@dataclass
class StudyResult:
    study: str
    storage: str
    tracking_uri: str
    parent_run_id: str | None
    mode: str
    baseline: TrialOutcome | None
    best: TrialOutcome | None
    pareto: list[TrialOutcome]
    trials: list[TrialOutcome]
    final: str  # "baseline" or "kept:<trial>"
    final_settings: Settings | None
    interrupted: str | None = None
    tracking_failures: list[str] = field(default_factory=list)
    mlflow_experiment_id: str | None = None
    confirmation: dict[str, Any] | None = None

    @property
    def improvement_percent(self) -> float | None:
        if self.best is None or self.baseline is None:
            return None
        if self.best.score is None or self.baseline.score is None:
            return None
        return improvement_percent(self.best.score, self.baseline.score)


Event = Callable[[str, dict[str, Any]], None]


def outcome_of(t: Any) -> TrialOutcome:
    """A finished Optuna trial as a ``TrialOutcome`` (from its user attrs)."""
    ua = t.user_attrs
    vals = tuple(t.values) if t.values is not None else None
    return TrialOutcome(number=t.number, state=t.state.name, verdict=ua.get("verdict", "?"),
                        values=dict(ua.get("values", {})), score=ua.get("score"),
                        objective=vals, metrics=dict(ua.get("metrics", {})),
                        is_baseline=ua.get("role") == "baseline")


def recommended(study: Any) -> tuple[TrialOutcome | None, list[TrialOutcome]]:
    """(best trial by scalar score among feasible completed ones, Pareto front)."""
    done = [outcome_of(t) for t in optuna_io.trials(study) if t.state.name == "COMPLETE"]
    if not done:
        return None, []
    front = [outcome_of(t) for t in optuna_io.best_trials(study)]
    feasible = [o for o in done if o.metrics.get("pfc_constraint", 0.0) <= 0
                or len(study.directions) == 1]
    pool = feasible or done
    best = max(pool, key=lambda o: (o.score if o.score is not None else float("-inf"),
                                    -o.number))
    return best, front


class StudyRunner:
    """Runs (or resumes) one study on one cluster. Not thread-safe; one per process."""

    def __init__(self, exp: Experiment, exp_yaml: str, cluster: Cluster, *, study_name: str,
                 tracker: Tracker | None = None, keep_best: bool = False,
                 on_event: Event | None = None) -> None:
        self.exp = exp
        self.exp_yaml = exp_yaml
        self.cluster = cluster
        self.study_name = study_name
        self.keep_best = keep_best
        self.on_event = on_event or (lambda kind, data: None)
        self.results = exp.results_path
        self.trial_dir = self.results / study_name
        self.journal = Journal(self.results / "journal.jsonl")
        self.tracker = tracker or Tracker(exp.tracking_uri, exp.tracking_experiment,
                                          self.results / "mlartifacts",
                                          enabled=exp.tracking.enabled)
        self.space: SearchSpace = build_space(exp)
        self.dists = optuna_io.distributions(self.space)
        self.cfg = score_config(exp)
        self.guard = SignalGuard()
        self.study: Any = None
        self.desc: ClusterDescription | None = None
        self.baseline_settings: Settings | None = None
        self.baseline_values: dict[str, int] = {}
        self.baseline_measurement: Measurement | None = None

    # Set-up --------------------------------------------------------------------------------
    def _refuse_if_dirty(self) -> None:
        """A change left open by a killed run: the canary may be on trial settings. Refuse to
        tune on top of it; `ecntune recover` restores (and verifies) its baseline first."""
        entry = self.journal.dirty()
        if entry is not None:
            raise RollbackError(
                f"journal {self.journal.path} has an open change (study {entry.study}, trial "
                f"{entry.trial}) on {', '.join(entry.targets)}: the canary may not be on its "
                f"baseline. Run `ecntune recover --results {self.results}` first")

    def _open_study(self, resume: bool) -> None:
        multi = self.exp.objective.mode == "multi"
        sampler = optuna_io.make_sampler(self.exp.sampler, multi)
        storage = self.exp.storage_url
        if resume:
            self.study = optuna_io.load_study(self.study_name, storage, sampler)
            stale = optuna_io.fail_stale(self.study)
            if stale:
                self.on_event("stale", {"trials": stale})
        else:
            dirs = ["maximize"] if not multi else ["maximize", "minimize"]
            self.study = optuna_io.create_study(self.study_name, storage, dirs, sampler)
            for k, v in {"experiment_yaml": self.exp_yaml, "experiment_name": self.exp.name,
                         "mode": self.exp.objective.mode, "created_at": time.time(),
                         "ecntune_version": __version__}.items():
                self.study.set_user_attr(k, v)

    def _ensure_baseline(self) -> None:
        trials = optuna_io.trials(self.study)
        done = [t for t in trials if t.user_attrs.get("role") == "baseline"
                and t.state.name == "COMPLETE"]
        if done:
            raw = self.study.user_attrs.get("baseline_measurement")
            self.baseline_measurement = Measurement.model_validate_json(raw) if raw else None
            return
        waiting = [t for t in trials if t.state.name == "WAITING"
                   and t.user_attrs.get("role") == "baseline"]
        if not waiting:
            optuna_io.enqueue(self.study, self.space.params_of(self.baseline_values),
                              "baseline")

    def _start_tracking(self) -> None:
        exp = self.exp
        assert self.desc is not None
        params: dict[str, Any] = {
            "experiment": exp.name, "study": self.study_name, "backend": self.desc.backend,
            "sampler": exp.sampler.name, "sampler_seed": exp.sampler.seed,
            "mode": exp.objective.mode, "trials_budget": exp.budget.trials,
            "canary_switches": ",".join(self.desc.canary_switches),
            "canary_nics": ",".join(self.desc.canary_nics),
            **{f"fabric.{k}": v for k, v in self.desc.facts.items()},
            **{f"space.{k}": v for k, v in self.space.describe().items()
               if not k.startswith("fixed.")},
            **{f"fixed.{k}": v for k, v in self.space.fixed.items()},
            **{f"objective.{k}": v for k, v in exp.objective.model_dump().items()},
            **{f"safety.{k}": v for k, v in exp.safety.model_dump().items()},
        }
        tags = {"ecntune.version": __version__, "ecntune.study": self.study_name,
                "ecntune.storage": exp.storage_url, "ecntune.cluster": self.desc.name}
        texts = {"experiment.yaml": redact(self.exp_yaml),
                 "search_space.json": json.dumps(self.space.describe(), indent=2),
                 "fabric.json": self.desc.model_dump_json(indent=2)}
        rid = self.tracker.start_study(self.study_name,
                                       self.study.user_attrs.get("mlflow_parent_run_id"),
                                       params, tags, texts)
        if rid and not self.study.user_attrs.get("mlflow_parent_run_id"):
            self.study.set_user_attr("mlflow_parent_run_id", rid)

    def backfill(self) -> int:
        """Log finished trials MLflow does not have yet (tracking was down). Returns count.

        The source of truth is MLflow itself: nested runs carry ``ecntune.trial``; every
        finished Optuna trial without one is logged again from its Optuna user attrs.
        """
        if self.tracker.parent_run_id is None:
            return 0
        try:
            logged = {int(r.data.tags.get("ecntune.trial", -1))
                      for r in self.tracker.nested_runs()}
        except Exception as exc:  # still down: try again later
            self.tracker._fail("back-fill", exc)
            return 0
        n = 0
        for t in optuna_io.trials(self.study):
            if t.state.name not in ("COMPLETE", "PRUNED", "FAIL") or t.number in logged:
                continue
            rid = self.tracker.log_trial(self._record(t.number, t.state.name, t.user_attrs,
                                                      t.params))
            if rid is None:
                break
            n += 1
        return n

    def _record(self, number: int, state: str, ua: dict[str, Any],
                params: dict[str, Any]) -> TrialRecord:
        p: dict[str, Any] = dict(ua.get("values", {}))
        if "kmax_ratio" in params:
            p["kmax_ratio"] = round(float(params["kmax_ratio"]), 4)
        return TrialRecord(number=number, state=state, verdict=ua.get("verdict", "?"),
                           params=p, metrics=dict(ua.get("metrics", {})),
                           measurement_path=ua.get("measurement_path"),
                           detail=str(ua.get("detail", "")),
                           artifact_dir=ua.get("artifact_dir"))

    # One trial -----------------------------------------------------------------------------
    def _budget_used(self) -> int:
        return sum(1 for t in optuna_io.trials(self.study)
                   if t.user_attrs.get("role") != "baseline"
                   and t.state.name in ("COMPLETE", "PRUNED", "FAIL")
                   and t.user_attrs.get("verdict") != "interrupted")

    def _budget_spent(self, used: int) -> bool:
        """Stop asking? (A worker of a shared study counts every worker's trials.)"""
        return used >= self.exp.budget.trials

    def _save_measurement(self, number: int, m: Measurement) -> str:
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        path = self.trial_dir / f"trial-{number:04d}.json"
        path.write_text(m.model_dump_json(indent=1), encoding="utf-8")
        return str(path)

    def _trial_files(self, number: int, values: dict[str, int],
                     m: Measurement | None) -> str | None:
        """The nested run's extra artifacts (settings diff, raw outputs, sim time series)."""
        try:
            from tuner.plots import write_trial_files

            return str(write_trial_files(self.trial_dir / f"trial-{number:04d}", values,
                                         self.baseline_values, m))
        except Exception as exc:  # a plot must never cost a trial
            self.tracker._fail(f"trial {number} artifacts", exc)
            return None

    def _log_report(self) -> None:
        """The study report (HTML, Markdown, plots) into the parent run's ``report/``."""
        try:
            from tuner.report import load, write_report

            files = write_report(load(self.study_name, self.exp.storage_url),
                                 self.trial_dir / "report")
            self.tracker.log_dir(files.html.parent, "report")
        except Exception as exc:
            self.tracker._fail("study report", exc)

    def _restore(self) -> float:
        assert self.baseline_settings is not None
        with self.guard.shield():
            return restore(self.cluster, self.baseline_settings).seconds

    def _finish_trial(self, asked: optuna_io.Asked, *, verdict: str, values: dict[str, int],
                      state: Any, m: Measurement | None = None, sc: Score | None = None,
                      extra_metrics: dict[str, float] | None = None,
                      baseline: bool = False, detail: str = "") -> TrialOutcome:
        metrics: dict[str, float] = {}
        attrs: dict[str, Any] = {"verdict": verdict, "values": values}
        if detail:
            attrs["detail"] = detail[:1000]
        if m is not None:
            metrics.update(trial_metrics(m))
            attrs["measurement_path"] = self._save_measurement(asked.number, m)
        if sc is not None:
            metrics.update(sc.metrics())
            attrs["score"] = sc.scalar
        metrics.update(extra_metrics or {})
        attrs["metrics"] = metrics
        if self.tracker.enabled:
            attrs["artifact_dir"] = self._trial_files(asked.number, values, m)
        tell_values = sc.values if sc is not None and state == optuna_io.COMPLETE else None
        constraint = (sc.constraint if sc is not None and self.exp.objective.mode == "multi"
                      else None)
        with self.guard.shield():  # a local, quick write: never half-done
            optuna_io.tell(self.study, asked, state=state, values=tell_values,
                           constraint=constraint, attrs=attrs)
        # Not shielded: a hung tracking server must stay interruptible. The canary is already
        # back on the baseline here, and a missed run is back-filled from Optuna later.
        self.tracker.log_trial(self._record(asked.number, state.name, attrs, asked.params))
        out = TrialOutcome(number=asked.number, state=state.name, verdict=verdict,
                           values=values, score=sc.scalar if sc else None,
                           objective=tell_values, metrics=metrics, is_baseline=baseline)
        return out

    def _measure(self, monitor: Monitor | None) -> Measurement:
        return self.cluster.measure(
            self.exp.workload, _GuardedMonitor(monitor, self.guard,
                                               self.exp.safety.poll_interval_s))

    def _run_baseline(self, asked: optuna_io.Asked) -> TrialOutcome:
        values = dict(self.baseline_values)
        try:
            m = self._measure(None)
        except KeyboardInterrupt:
            with self.guard.shield():
                optuna_io.tell(self.study, asked, state=optuna_io.FAIL,
                               attrs={"verdict": "interrupted", "values": values})
            raise
        except MeasurementError as exc:
            self._finish_trial(asked, verdict="failed:measurement", values=values,
                               state=optuna_io.FAIL, baseline=True)
            raise MeasurementError(f"baseline measurement failed: {exc}") from exc
        self.baseline_measurement = m
        self.study.set_user_attr("baseline_measurement", m.model_dump_json())
        sc = score(m, self.cfg)
        return self._finish_trial(asked, verdict="baseline", values=values,
                                  state=optuna_io.COMPLETE, m=m, sc=sc, baseline=True)

    def _run_trial(self, asked: optuna_io.Asked) -> TrialOutcome:
        assert self.desc is not None and self.baseline_settings is not None
        values = self.space.values(asked.params, self.baseline_values)
        xoff = self.desc.facts.get("xoff_bytes")
        violations = check_proposal(values, xoff_bytes=int(xoff) if xoff else None,
                                    line_rate_mbps=int(self.desc.nic_gbps * 1000),
                                    limits=self.exp.safety)
        if violations:
            return self._finish_trial(asked, verdict=f"rejected:{violations[0].code}",
                                      values=values, state=optuna_io.PRUNED,
                                      detail="; ".join(str(v) for v in violations))
        try:
            settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                        values)
        except ValueError as exc:  # a model invariant check_proposal does not know about
            return self._finish_trial(asked, verdict="rejected:invalid_settings",
                                      values=values, state=optuna_io.PRUNED, detail=str(exc))
        entry = self.journal.begin(self.study_name, asked.number, settings.targets(),
                                   self.baseline_settings, settings)
        verdict, m, restore_s, detail = "ok", None, 0.0, ""
        monitor = LiveMonitor(self.exp.safety)
        partial: Measurement | None = None  # counters up to a live abort, for the record
        c0 = self.cluster.counters()
        try:
            self.cluster.apply(settings)
            got = self.cluster.read_back()
            if got != settings:
                diffs = ", ".join(f"{k}: {a} != {b}" for k, (a, b) in
                                  list(got.diff(settings).items())[:5])
                raise ApplyError(f"read-back differs from what was applied: {diffs}")
            m = self._measure(monitor)
        except SafetyAbort as exc:
            verdict, detail = f"rolled_back:{exc.reason}", exc.detail
            c1 = self.cluster.counters()
            partial = Measurement(counters_before=c0, counters_after=c1,
                                  duration_s=max(c1.taken_at_s - c0.taken_at_s, 0.0),
                                  notes=[f"aborted by the live monitor: {exc}"])
        except ApplyError as exc:
            verdict, detail = "failed:apply", str(exc)
        except MeasurementError as exc:
            verdict, detail = "failed:measurement", str(exc)
        except KeyboardInterrupt:
            restore_s = self._restore()
            self.journal.end(entry, "restored")
            with self.guard.shield():
                optuna_io.tell(self.study, asked, state=optuna_io.FAIL,
                               attrs={"verdict": "interrupted", "values": values})
            raise
        except BaseException:
            self._restore()
            self.journal.end(entry, "restored")
            raise
        if m is not None:
            found = judge(m, self.exp.safety, self.baseline_measurement)
            if found:
                verdict = f"rolled_back:{found[0].code}"
                detail = "; ".join(str(v) for v in found)
        restore_s = self._restore()
        self.journal.end(entry, "restored")
        extra = {"restore_s": restore_s}
        if verdict == "ok" and m is not None:
            sc = score(m, self.cfg)
            return self._finish_trial(asked, verdict=verdict, values=values,
                                      state=optuna_io.COMPLETE, m=m, sc=sc,
                                      extra_metrics=extra)
        state = optuna_io.PRUNED if verdict.startswith("rolled_back") else optuna_io.FAIL
        bad = score(m, self.cfg) if m is not None else None
        return self._finish_trial(asked, verdict=verdict, values=values, state=state,
                                  m=m or partial, sc=bad, extra_metrics=extra, detail=detail)

    # The study -----------------------------------------------------------------------------
    def _confirm(self) -> None:
        """Re-measure the best trial and the baseline ``confirm_repeats`` times each.

        The best of many noisy single measurements is biased upwards (winner's curse); fresh
        repeats give the improvement the final table reports. A repeat the live monitor aborts
        marks the winner unconfirmed. Stored as the study user attr ``confirmation``.
        """
        assert self.desc is not None and self.baseline_settings is not None
        n = self.exp.budget.confirm_repeats
        best, _ = recommended(self.study)
        if n <= 0 or best is None or best.is_baseline:
            return
        self.on_event("confirm", {"trial": best.number, "repeats": n})
        settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                    best.values)
        best_scores: list[float] = []
        problem = ""
        entry = self.journal.begin(self.study_name, best.number, settings.targets(),
                                   self.baseline_settings, settings)
        try:
            self.cluster.apply(settings)
            if self.cluster.read_back() != settings:
                raise ApplyError("read-back differs from the best trial's settings")
            for _ in range(n):
                m = self._measure(LiveMonitor(self.exp.safety))
                found = judge(m, self.exp.safety, self.baseline_measurement)
                if found:
                    problem = f"rolled_back:{found[0].code}"
                    break
                best_scores.append(score(m, self.cfg).scalar)
        except SafetyAbort as exc:
            problem = f"rolled_back:{exc.reason}"
        except (ApplyError, MeasurementError) as exc:
            problem = f"failed: {exc}"
        finally:
            self._restore()
            self.journal.end(entry, "restored")
        base_scores = [score(self._measure(None), self.cfg).scalar for _ in range(n)]
        conf = {"trial": best.number, "repeats": n, "best_scores": best_scores,
                "baseline_scores": base_scores, "problem": problem}
        self.study.set_user_attr("confirmation", conf)

    def _promote_best(self) -> str:
        """Re-apply the best trial's settings and verify them; journal ``kept``."""
        assert self.desc is not None and self.baseline_settings is not None
        best, _ = recommended(self.study)
        if best is None or best.is_baseline or not best.values:
            return "baseline"
        conf = confirmation(self.study)
        if conf is not None and conf.get("trial") == best.number and (
                conf.get("problem") or conf.get("best_score", 0.0) <= conf["baseline_score"]):
            return "baseline"  # the fresh repeats did not confirm the winner: do not promote
        settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                    best.values)
        entry = self.journal.begin(self.study_name, best.number, settings.targets(),
                                   self.baseline_settings, settings)
        try:
            restore(self.cluster, settings)
        except RollbackError:
            self._restore()
            self.journal.end(entry, "restored")
            raise
        self.journal.end(entry, "kept")
        self.study.set_user_attr("kept_trial", best.number)
        return f"kept:{best.number}"

    def run(self, *, resume: bool = False) -> StudyResult:
        """Run the study to its budget; see the module docstring for what happens on signals."""
        self.guard.install()
        interrupted: str | None = None
        failed = False
        final = "baseline"
        try:
            with self.guard.shield():
                self._refuse_if_dirty()
                self.desc = self.cluster.describe()
                self.baseline_settings = self.cluster.snapshot()
                self.baseline_values = self.baseline_settings.flat()
                self._open_study(resume)
                self.study.set_user_attr("canary", {"switches": self.desc.canary_switches,
                                                    "nics": self.desc.canary_nics})
                self._ensure_baseline()
                self._start_tracking()
                self.backfill()
            t0 = time.monotonic()
            used = self._budget_used()
            self.on_event("start", {"study": self.study_name, "total": self.exp.budget.trials,
                                    "done": used, "resume": resume})
            while True:
                self.guard.check()
                has_baseline = self.baseline_measurement is not None
                if has_baseline and self._budget_spent(used):
                    break
                if has_baseline and time.monotonic() - t0 > self.exp.budget.wall_time_s:
                    self.on_event("wall_time", {"elapsed_s": time.monotonic() - t0})
                    break
                with self.guard.shield():
                    asked = optuna_io.ask(self.study, self.dists)
                is_base = asked.trial.user_attrs.get("role") == "baseline"
                if is_base:
                    out = self._run_baseline(asked)
                else:
                    out = self._run_trial(asked)
                    used += 1
                best, _ = recommended(self.study)
                self.on_event("trial", {"outcome": out, "best": best, "used": used})
            self._confirm()
        except KeyboardInterrupt as exc:
            interrupted = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
            raise Interrupted(interrupted) from None
        except BaseException:
            failed = True
            raise
        finally:
            with self.guard.shield():
                try:
                    if self.baseline_settings is not None:
                        self._restore()
                        if self.keep_best and not failed and self.study is not None:
                            final = self._promote_best()
                finally:
                    self._end_tracking(interrupted, failed)
                    self.guard.uninstall()
        return self.result(final)

    def _end_tracking(self, interrupted: str | None, failed: bool) -> None:
        if self.study is None or self.tracker.parent_run_id is None:
            return
        self.backfill()
        best, _ = recommended(self.study)
        base = next((outcome_of(t) for t in optuna_io.trials(self.study)
                     if t.user_attrs.get("role") == "baseline" and t.state.name == "COMPLETE"),
                    None)
        counts: dict[str, float] = {"trials_ok": 0, "trials_rolled_back": 0,
                                    "trials_rejected": 0, "trials_failed": 0}
        for t in optuna_io.trials(self.study):
            v = str(t.user_attrs.get("verdict", ""))
            key = {"ok": "trials_ok", "rolled_back": "trials_rolled_back",
                   "rejected": "trials_rejected", "failed": "trials_failed"}.get(v.split(":")[0])
            if key:
                counts[key] += 1
        metrics = dict(counts)
        if base is not None and base.score is not None:
            metrics["baseline_score"] = base.score
        if best is not None and best.score is not None:
            metrics["best_score"] = best.score
            metrics["best_trial"] = best.number
            if base is not None and base.score is not None:
                metrics["improvement_percent"] = improvement_percent(best.score, base.score)
        conf = confirmation(self.study)
        if conf is not None:
            metrics.update({f"confirmed_{k}": v for k, v in conf.items()
                            if isinstance(v, float)})
        summary = {"study": self.study_name, "best_trial": best.number if best else None,
                   "best_values": best.values if best else None,
                   "interrupted": interrupted, "failed": failed}
        status = "FAILED" if failed else ("KILLED" if interrupted else "FINISHED")
        if not interrupted:
            self._log_report()
        self.tracker.end_study(metrics, summary, status=status)

    def result(self, final: str = "baseline") -> StudyResult:
        trials = [outcome_of(t) for t in optuna_io.trials(self.study)
                  if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]
        base = next((o for o in trials if o.is_baseline and o.state == "COMPLETE"), None)
        best, front = recommended(self.study)
        final_settings = None
        if self.desc is not None:
            final_settings = self.cluster.read_back()
        return StudyResult(
            study=self.study_name, storage=self.exp.storage_url,
            tracking_uri=self.exp.tracking_uri if self.tracker.enabled else "",
            parent_run_id=self.tracker.parent_run_id,
            mode=self.exp.objective.mode, baseline=base, best=best, pareto=front,
            trials=trials, final=final, final_settings=final_settings,
            tracking_failures=list(self.tracker.failures),
            mlflow_experiment_id=self.tracker.experiment_id,
            confirmation=confirmation(self.study))


def confirmation(study: Any) -> dict[str, Any] | None:
    """The confirmation repeats (see ``StudyRunner._confirm``) with means and the gain."""
    conf = study.user_attrs.get("confirmation")
    if not conf or not conf.get("baseline_scores"):
        return None
    out = dict(conf)
    base = sum(conf["baseline_scores"]) / len(conf["baseline_scores"])
    out["baseline_score"] = base
    if conf.get("best_scores"):
        best = sum(conf["best_scores"]) / len(conf["best_scores"])
        out["best_score"] = best
        out["improvement_percent"] = improvement_percent(best, base)
    return out


def default_study_name(exp: Experiment) -> str:
    return f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def load_for_resume(storage: str, study: str | None) -> tuple[str, str]:
    """(study name, stored experiment YAML) of a study to resume (default: the newest)."""
    names = optuna_io.study_names(storage)
    if not names:
        raise ConfigError(f"no studies in {storage}")
    name = study or names[-1]
    st = optuna_io.load_study(name, storage)
    text = st.user_attrs.get("experiment_yaml")
    if not text:
        raise ConfigError(f"study {name!r} in {storage} was not created by ecntune run "
                          "(no experiment_yaml); pass --experiment FILE")
    return name, str(text)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")


__all__ = ["Interrupted", "StudyResult", "StudyRunner", "TrialOutcome", "TunerError",
           "build_cluster", "default_study_name", "load_for_resume", "recommended"]
