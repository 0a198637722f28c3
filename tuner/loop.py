"""The trial lifecycle: baseline, ask, check, apply, verify, measure, judge, score, tell, log.

Trial 0 measures the canary as it is (the baseline) on the study's paired replicates: the same
placements and seeds that every later trial is measured on (``budget.repeats``; ``auto``
chooses their number from the baseline's own noise). The known-good starting points follow
(``tuner.warm_starts``). Every later trial:

1. ask Optuna; turn the params into knob values (``tuner.space``);
2. ``safety.limits.check_proposal``: a proposal breaking a static rule is never applied; it is
   told to Optuna as PRUNED with verdict ``rejected:<code>`` and a ``static_limits`` constraint;
3. one guarded change (``tuner.transaction``): journal, apply, read back, ...
4. measure each replicate with a live ``safety.monitor.LiveMonitor`` (``SafetyAbort`` =>
   ``rolled_back``), judge it post hoc by the same rules, and report the running paired score
   to the pruner, which may stop a clearly worse trial early (``pruned:early_stop``); a trial
   that would go to the confirmation is measured on further study placements first
   (``budget.candidate_placements``: intensification, as in SMAC), so that a guardrail it
   meets only on the study's first few placements is caught before it takes a confirmation
   slot;
5. ... and the verified restore;
6. score against the baseline replicate by replicate (``objectives.score``), tell Optuna the
   value and every constraint (a rolled-back trial carries ``safety``), log the MLflow run.

Every ``budget.baseline_every`` trials the baseline is measured again (drift). At the end the
top candidates and the baseline are measured interleaved on fresh paired replicates and the
winner is confirmed or not (``tuner.study``).

Signals: the first SIGINT/SIGTERM only sets a flag; the running measurement stops at its next
monitor poll, the canary is restored, the in-flight trial is told FAIL (``interrupted``) and
``Interrupted`` is raised. A second signal interrupts at once, except while a restore runs. At
the end, on interrupt or on failure the canary is restored to the baseline; with ``keep_best``
the confirmed winner's settings are re-applied and verified instead (normal end only, never an
unconfirmed trial).
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from objectives.measurement import Measurement
from objectives.score import Score, ScoreConfig, score
from objectives.verdict import judge as judge_confirmation
from objectives.verdict import winner_of
from safety.journal import Journal
from safety.limits import PfcThreshold, check_proposal, describe, kmax_ceiling
from safety.monitor import LiveMonitor, judge, storm_window_s
from tuner import __version__, optuna_io, study_store
from tuner import study as studies
from tuner.errors import (
    ApplyError,
    MeasurementError,
    ProtectionLost,
    RollbackError,
    SafetyAbort,
    TunerError,
)
from tuner.plots import TRIAL_COUNTS, kind
from tuner.settings import Settings
from tuner.space import SearchSpace, build_space
from tuner.study import Confirmation, StudyResult, TrialOutcome
from tuner.tracking import Tracker, TrialRecord, redact, trial_metrics
from tuner.transaction import Transactions
from tuner.warm_starts import warm_starts

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.cluster.base import Cluster, ClusterDescription, Monitor
    from tuner.experiment import Experiment
    from tuner.screen import TwinScreen

# The constraint told to Optuna for a proposal that was refused, screened or rolled back: worse
# than any measured trial's guardrails (each bounded to < 1), so the sampler ranks what it could
# not even measure last and does not drift towards it.
NEVER_KEPT = 10.0
AUTO_REPLICATES = 5  # baseline replicates measured to size ``repeats: auto``
# A trial's nested run lives seconds from create_run to set_terminated (its artifacts are a
# few files): one still RUNNING after five minutes has no writer left.
ORPHAN_AFTER_S = 300.0
# Confirmation replicates are drawn per study from this range: fresh placements, never the
# study's own (0..repeats-1), and different in every study.
CONFIRM_SEEDS = (1_000_000, 2**31 - 1)


def confirmation_seeds(n: int, study_name: str, sampler_seed: int | None) -> list[int]:
    """``n`` distinct placement numbers for a study's confirmation, recorded with it: drawn
    from the study's name and the sampler seed, so every study gets its own (a default name
    carries its start time) while a named study with a fixed seed can be reproduced."""
    rng = np.random.default_rng([zlib.crc32(study_name.encode()), sampler_seed or 0])
    seeds: list[int] = []
    while len(seeds) < n:
        x = int(rng.integers(*CONFIRM_SEEDS))
        if x not in seeds:
            seeds.append(x)
    return seeds


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the study (the canary was restored first)."""

    def __init__(self, signame: str) -> None:
        super().__init__(f"{signame} received; canary restored")
        self.signame = signame


def score_config(exp: Experiment) -> ScoreConfig:
    o = exp.objective
    return ScoreConfig(mode=o.mode, primary=o.primary, busbw_weight=o.busbw_weight,
                       latency_weight=o.latency_weight, pfc_weight=o.pfc_weight,
                       guardrails=o.guardrails, priority=exp.safety.roce_priority)


def poll_intervals(fact: str) -> dict[str, float]:
    """``describe().facts["counter_poll_s"]`` (``"pfc=1,queue=10"``) as a dict."""
    out = {}
    for part in filter(None, fact.split(",")):
        name, _, value = part.partition("=")
        out[name.strip()] = float(value)
    return out


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


Event = Callable[[str, dict[str, Any]], None]


def _stripped(m: Measurement) -> Measurement:
    """A measurement without its raw tool outputs (what the study database keeps)."""
    return m.model_copy(update={"raw": {}})


class StudyRunner:
    """Runs (or resumes) one study on one cluster. Not thread-safe; one per process."""

    def __init__(self, exp: Experiment, exp_yaml: str, cluster: Cluster, *, study_name: str,
                 tracker: Tracker | None = None, keep_best: bool = False,
                 on_event: Event | None = None,
                 warm: list[tuple[str, dict[str, int]]] | None = None,
                 lineage: dict[str, str] | None = None,
                 summarize: Callable[[Any], tuple[dict[str, float], dict[str, Any]]]
                 | None = None, findings: list[dict[str, Any]] | None = None,
                 findings_accepted: bool = False) -> None:
        self.exp = exp
        # A re-tune (tuner/lifecycle/retune.py): points measured right after trial 0 (each
        # "warm:<label>", always confirmed against the baseline at the end when it completes
        # as a candidate) and the old study it descends from (study attrs + MLflow tags).
        self.warm = list(warm or [])
        self.lineage = dict(lineage or {})
        # (parent-run metrics, summary.json block) of the finished study (retune's summary)
        self.summarize = summarize
        # what the preflight diagnosis found (tuner.diagnose.record), stored with a new study
        self.findings = findings
        self.findings_accepted = findings_accepted
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
        self.twin_key = study_store.TWIN_TRIALS  # where this runner counts its twin trials
        self.guard = SignalGuard()
        self.study: Any = None
        self.desc: ClusterDescription | None = None
        self.baseline_settings: Settings | None = None
        self.baseline_values: dict[str, int] = {}
        self.baseline_ms: list[Measurement] = []  # one per paired replicate
        self.repeats = exp.budget.repeats if isinstance(exp.budget.repeats, int) else 0
        self.window_s = storm_window_s(exp.safety, None)
        self.tx: Transactions | None = None
        self.screen: TwinScreen | None = None
        self.poll_s: dict[str, float] = {}  # switch counter poll interval per family
        self.saved_s = 0.0  # canary time early stopping saved (measurement seconds)

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

    def _pruner(self) -> Any:
        b = self.exp.budget
        if self.exp.objective.mode == "multi" or b.prune_margin <= 0:
            return None
        return optuna_io.PairedMedianPruner(b.prune_margin,
                                            max(self.exp.sampler.startup_trials, 3))

    def _open_study(self, resume: bool) -> None:
        multi = self.exp.objective.mode == "multi"
        sampler = optuna_io.make_sampler(
            self.exp.sampler, multi,
            pfc_alarm_us_per_s=self.exp.objective.guardrails.max_pfc_pause_us_per_s)
        storage = self.exp.storage_url
        if resume:
            self.study = optuna_io.load_study(self.study_name, storage, sampler, self._pruner())
            stale, alive = optuna_io.fail_stale(self.study)
            if stale:
                self.on_event("stale", {"trials": stale})
            if alive:  # another live run's (a shared study), or one this host cannot judge
                self.on_event("running_elsewhere", {"trials": alive})
            return
        dirs = ["maximize"] if not multi else ["maximize", "minimize"]
        self.study = optuna_io.create_study(self.study_name, storage, dirs, sampler,
                                            self._pruner())
        study_store.created(self.study, experiment_yaml=self.exp_yaml,
                            experiment_name=self.exp.name, mode=self.exp.objective.mode,
                            ecntune_version=__version__,
                            startup_trials=self.exp.sampler.random_startup,
                            # the effective budget (--trials included): what `resume` continues
                            trials_budget=self.exp.budget.trials)
        if self.lineage:
            study_store.record(self.study, lineage=self.lineage)
        if self.findings is not None:
            study_store.record(self.study, findings=self.findings,
                               findings_accepted=self.findings_accepted)

    def _ensure_baseline(self) -> None:
        """Enqueue trial 0 (and the warm starts) on a new study; load its replicates on resume."""
        trials = optuna_io.trials(self.study)
        done = [t for t in trials if study_store.tags(t).role == "baseline"
                and t.state.name == "COMPLETE"]
        if done:
            self.baseline_ms, repeats = study_store.baseline(self.study)
            self.repeats = repeats or len(self.baseline_ms) or 1
            self._set_window()
            return
        if any(t.state.name == "WAITING" and study_store.tags(t).role == "baseline"
               for t in trials):
            return
        optuna_io.enqueue(self.study, self.space.params_of(self.baseline_values), "baseline")
        self._enqueue_warm_starts()

    def _kmax_ceiling(self) -> int | None:
        """Kmax's ECN-before-PFC ceiling from the cluster's PFC threshold (None: unknown)."""
        assert self.desc is not None
        pfc = PfcThreshold.from_facts(self.desc.facts)
        return kmax_ceiling(pfc, self.exp.safety) if pfc else None

    def _warm_points(self) -> list[tuple[str, dict[str, int]]]:
        """The given starting points (``retune``), then the known-good ones for this fabric."""
        points = list(self.warm)
        if self.exp.search.warm_starts:
            assert self.desc is not None
            points += [(w.label, {"kmin_bytes": w.kmin_bytes, "kmax_bytes": w.kmax_bytes,
                                  "pmax_percent": w.pmax_percent})
                       for w in warm_starts(self.desc.nic_gbps, self._kmax_ceiling())]
        return points

    def _enqueue_warm_starts(self) -> None:
        """Each starting point (knob values over the baseline's) once, as ``warm:<label>``."""
        seen = {tuple(sorted(self.space.params_of(self.baseline_values).items()))}
        for label, knobs in self._warm_points():
            values = dict(self.baseline_values, **knobs)
            values.update(self.space.fixed)
            params = self.space.params_of(values)
            key = tuple(sorted(params.items()))
            if key in seen:  # the baseline (or an earlier point) already is this point
                continue
            seen.add(key)
            optuna_io.enqueue(self.study, params, f"warm:{label}")

    def _set_window(self) -> None:
        # the study's paired placements only: the rest are measured for would-be candidates
        durations = [m.duration_s for m in self.baseline_ms[:self.repeats or None]
                     if m.duration_s > 0]
        self.window_s = storm_window_s(self.exp.safety,
                                       float(np.mean(durations)) if durations else None)

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
                "ecntune.storage": exp.storage_url, "ecntune.cluster": self.desc.name,
                **{f"ecntune.{k}": v for k, v in self.lineage.items()}}
        texts = {"experiment.yaml": redact(self.exp_yaml),
                 "search_space.json": json.dumps(self.space.describe(), indent=2),
                 "fabric.json": self.desc.model_dump_json(indent=2)}
        known = study_store.info(self.study).mlflow_parent_run_id
        rid = self.tracker.start_study(self.study_name, known, params, tags, texts)
        if rid and not known:
            study_store.record(self.study, mlflow_parent_run_id=rid,
                               mlflow_tracking_uri=exp.tracking_uri)  # for a re-tune

    def backfill(self) -> int:
        """Log finished trials MLflow does not have yet (tracking was down). Returns count.

        The source of truth is MLflow itself: nested runs carry ``ecntune.trial``; every
        finished Optuna trial without one is logged again from its Optuna user attrs.
        """
        if self.tracker.parent_run_id is None:
            return 0
        try:
            runs = self.tracker.nested_runs()
            # A nested run still RUNNING long after it was created lost its writer (killed
            # between create_run and set_terminated): close it and log the trial again.
            stale = time.time() * 1000 - ORPHAN_AFTER_S * 1000
            orphans = [r for r in runs if r.info.status == "RUNNING"
                       and r.info.start_time < stale]
            for r in orphans:
                self.tracker.close_orphan(r.info.run_id)
            logged = {int(r.data.tags.get("ecntune.trial", -1)) for r in runs
                      if r not in orphans}
        except Exception as exc:  # still down: try again later
            self.tracker._fail("back-fill", exc)
            return 0
        n = 0
        for t in optuna_io.trials(self.study):
            if (t.state.name not in ("COMPLETE", "PRUNED", "FAIL") or t.number in logged
                    or not self._backfills(t)):
                continue
            rid = self.tracker.log_trial(self._record(t.number, t.state.name,
                                                      study_store.tags(t), t.params))
            if rid is None:
                break
            n += 1
        return n

    def _backfills(self, t: Any) -> bool:
        """Is a finished trial this runner's to back-fill? (A worker: its slice's only.)"""
        return True

    def _record(self, number: int, state: str, tags: study_store.Tags,
                params: dict[str, Any]) -> TrialRecord:
        p: dict[str, Any] = dict(tags.values)
        if "kmax_ratio" in params:
            p["kmax_ratio"] = round(float(params["kmax_ratio"]), 4)
        return TrialRecord(number=number, state=state, verdict=tags.verdict, params=p,
                           metrics=dict(tags.metrics), measurement_path=tags.measurement_path,
                           detail=tags.detail, artifact_dir=tags.artifact_dir,
                           origin=tags.role)

    # Measuring --------------------------------------------------------------------------------
    def _budget_used(self) -> int:
        tagged = ((t, study_store.tags(t)) for t in optuna_io.trials(self.study))
        return sum(1 for t, tg in tagged
                   if tg.role != "baseline" and t.state.name in ("COMPLETE", "PRUNED", "FAIL")
                   and tg.verdict != "interrupted")

    def _budget_spent(self, used: int) -> bool:
        """Stop asking? (A worker of a shared study counts every worker's trials.)"""
        return used >= self.exp.budget.trials

    def _measure(self, replicate: int, *, abort: bool = True) -> Measurement:
        """One replicate under a live monitor (``abort=False``: only record, the baseline);
        the monitor's pause samples ride along for the post-hoc rule."""
        monitor = LiveMonitor(self.exp.safety, self.window_s, abort=abort, poll_s=self.poll_s)
        m = self.cluster.measure(self.exp.workload,
                                 _GuardedMonitor(monitor, self.guard,
                                                 self.exp.safety.poll_interval_s),
                                 replicate=replicate)
        return m.model_copy(update={"pause_series": monitor.series})

    def _save(self, number: int, ms: list[Measurement]) -> str | None:
        """Every replicate's measurement as ``trial-NNNN.json`` (replicate 0) and
        ``trial-NNNN-rK.json``; returns the first one's path."""
        if not ms:
            return None
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for m in ms:
            suffix = "" if m is ms[0] else f"-r{m.replicate}"
            path = self.trial_dir / f"trial-{number:04d}{suffix}.json"
            path.write_text(m.model_dump_json(indent=1), encoding="utf-8")
            paths.append(str(path))
        return paths[0]

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

            files = write_report(
                load(self.study_name, self.exp.storage_url), self.trial_dir / "report",
                lambda done, total: self.on_event("report", {"done": done, "total": total}))
            self.tracker.log_dir(files.html.parent, "report")
        except Exception as exc:
            self.tracker._fail("study report", exc)

    def _finish_trial(self, asked: optuna_io.Asked, *, verdict: str, values: dict[str, int],
                      state: Any, ms: list[Measurement] | None = None, sc: Score | None = None,
                      constraints: dict[str, float] | None = None,
                      extra_metrics: dict[str, float] | None = None,
                      role: str = "proposal", detail: str = "") -> TrialOutcome:
        ms = ms or []
        metrics: dict[str, float] = {}
        attrs: dict[str, Any] = {"verdict": verdict, "values": values, "role": role,
                                 "replicates": len(ms)}
        if detail:
            attrs["detail"] = detail[:1000]
        if ms:
            # Over the paired replicates only: the baseline may hold more, measured just to
            # size ``repeats: auto``, and a mean over other placements is not like with like.
            per = [trial_metrics(m) for m in (ms[:self.repeats or None] if role == "baseline"
                                              else ms)]
            metrics.update({k: float(np.mean([p[k] for p in per if k in p]))
                            for k in per[0]})
            attrs["measurement_path"] = self._save(asked.number, ms)
        cons = dict(constraints or {})
        if sc is not None:
            metrics.update(sc.metrics())
            attrs["score"] = sc.scalar
            attrs["per_replicate"] = list(sc.per_replicate)
            cons = {**sc.constraints, **cons}
        metrics.update({f"constraint_{k}": v for k, v in cons.items()})
        metrics.update(extra_metrics or {})
        attrs["metrics"] = metrics
        if self.tracker.enabled:
            attrs["artifact_dir"] = self._trial_files(asked.number, values,
                                                      ms[0] if ms else None)
        tell_values = sc.values if sc is not None and state == optuna_io.COMPLETE else None
        with self.guard.shield():  # a local, quick write: never half-done
            optuna_io.tell(self.study, asked, state=state, values=tell_values,
                           constraints=cons, attrs=attrs)
        twin_trials = getattr(self.study.sampler, "twin_trials", None)
        if twin_trials is not None:  # counted apart: the canary budget counts the canary only
            study_store.count_twin_trials(self.study, self.twin_key, twin_trials)
        # Not shielded: a hung tracking server must stay interruptible. The canary is already
        # back on the baseline here, and a missed run is back-filled from Optuna later.
        self.tracker.log_trial(self._record(asked.number, state.name, study_store.Tags(**attrs),
                                            asked.params))
        return TrialOutcome(number=asked.number, state=state.name, verdict=verdict,
                            values=values, score=sc.scalar if sc else None,
                            objective=tell_values, metrics=metrics,
                            is_baseline=role == "baseline", role=role, constraints=cons)

    def _tell_interrupted(self, asked: optuna_io.Asked, values: dict[str, int]) -> None:
        with self.guard.shield():
            optuna_io.tell(self.study, asked, state=optuna_io.FAIL,
                           attrs={"verdict": "interrupted", "values": values})

    # Trial 0 ---------------------------------------------------------------------------------
    def _run_baseline(self, asked: optuna_io.Asked) -> TrialOutcome:
        values = dict(self.baseline_values)
        b = self.exp.budget
        try:
            first = AUTO_REPLICATES if b.repeats == "auto" else int(b.repeats)
            ms = [self._measure(r, abort=False) for r in range(first)]
            noise = noise_of(ms, self.cfg)
            if b.repeats == "auto":
                self.repeats = repeats_for(noise.get("score_sd", 0.0), most=b.repeats_max)
            else:
                self.repeats = first
            # every placement a trial may be measured on, so each pairs with the baseline's own
            wanted = max(self.repeats, b.candidate_placements)
            ms += [self._measure(r, abort=False) for r in range(len(ms), wanted)]
        except KeyboardInterrupt:
            self._tell_interrupted(asked, values)
            raise
        except MeasurementError as exc:
            self._finish_trial(asked, verdict="failed:measurement", values=values,
                               state=optuna_io.FAIL, role="baseline", detail=str(exc))
            raise MeasurementError(f"baseline measurement failed: {exc}") from exc
        self._refuse_starved_cnp_queue(asked, values, ms)
        self.baseline_ms = ms
        self._set_window()
        study_store.save_baseline(self.study, [_stripped(m) for m in ms], self.repeats,
                                  noise=noise)
        self.on_event("noise", {"repeats": self.repeats, "noise": noise,
                                "auto": b.repeats == "auto"})
        sc = score(ms[:self.repeats], ms, self.cfg)
        return self._finish_trial(asked, verdict="baseline", values=values,
                                  state=optuna_io.COMPLETE, ms=ms, sc=sc, role="baseline",
                                  extra_metrics={f"noise_{k}": v for k, v in noise.items()})

    def _refuse_starved_cnp_queue(self, asked: optuna_io.Asked, values: dict[str, int],
                                  ms: list[Measurement]) -> None:
        """A CNP queue that drops under the baseline load stops the study (DCQCN would tune
        blind): the trial fails and ``SafetyAbort`` ends the run before any change."""
        from tuner.preflight_facts import cnp_starvation

        bad = [r for r in cnp_starvation(self.exp, self.cluster, ms) if r.status == "fail"]
        if bad:
            detail = "; ".join(f"{r.target}: {r.evidence}" for r in bad)
            self._finish_trial(asked, verdict="failed:cnp_starvation", values=values,
                               state=optuna_io.FAIL, role="baseline", detail=detail)
            raise SafetyAbort("cnp_starvation", detail)

    def _attach_twin(self) -> None:
        """The digital twin, for the screen and for ``sampler: twin`` (one twin, one
        measurement per setting, shared by both)."""
        attach = getattr(self.study.sampler, "attach", None)
        if self.exp.screen.mode != "twin" and attach is None:
            return
        from tuner.screen import TwinScreen

        twin = TwinScreen(self.exp, self.cfg)
        if self.exp.screen.mode == "twin":
            self.screen = twin
        if attach is not None:
            attach(lambda params: twin.evaluate(self.space.values(params, self.baseline_values)),
                   lambda params: self.space.values(params, self.baseline_values))

    # One trial -------------------------------------------------------------------------------
    def _run_trial(self, asked: optuna_io.Asked, role: str) -> TrialOutcome:
        assert self.desc is not None and self.tx is not None
        values = self.space.values(asked.params, self.baseline_values)
        violations = check_proposal(values, pfc=PfcThreshold.from_facts(self.desc.facts),
                                    line_rate_mbps=int(self.desc.nic_gbps * 1000),
                                    limits=self.exp.safety)
        if violations:
            return self._finish_trial(asked, verdict=f"rejected:{violations[0].code}",
                                      values=values, state=optuna_io.PRUNED, role=role,
                                      constraints={"static_limits": NEVER_KEPT},
                                      detail=describe(violations))
        try:
            settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                        values)
        except ValueError as exc:  # a model invariant check_proposal does not know about
            return self._finish_trial(asked, verdict="rejected:invalid_settings",
                                      values=values, state=optuna_io.PRUNED, role=role,
                                      constraints={"static_limits": NEVER_KEPT}, detail=str(exc))
        given = {f"warm:{label}" for label, _ in self.warm}  # retune: always re-measured
        if self.screen is not None and role not in given:
            predicted = self.screen.verdict(values)
            if predicted is not None:
                return self._finish_trial(asked, verdict=predicted[0], values=values,
                                          state=optuna_io.PRUNED, role=role,
                                          constraints={"screen": NEVER_KEPT}, detail=predicted[1])
        verdict, detail = "ok", ""
        ms: list[Measurement] = []
        change = None
        try:
            with self.tx.applied(settings, asked.number) as change:
                verdict, detail = self._measure_replicates(asked, ms, change.counters_before)
                if verdict == "ok" and self._would_confirm(ms, role):
                    verdict, detail = self._measure_replicates(
                        asked, ms, change.counters_before,
                        range(len(ms), self.placements), intensify=True)
        except ApplyError as exc:
            verdict, detail = "failed:apply", str(exc)
        except ProtectionLost as exc:  # the canary stopped being ours: never scored
            ms.clear()
            verdict, detail = "failed:protection_lost", str(exc)
        except MeasurementError as exc:
            verdict, detail = "failed:measurement", str(exc)
        except KeyboardInterrupt:
            self._tell_interrupted(asked, values)
            raise
        extra = {"restore_s": change.restore_s if change else 0.0}
        whole = [m for m in ms if m.collectives or m.latency is not None]  # not a cut-off one
        sc = score(whole, self.baseline_ms, self.cfg) if whole else None
        if verdict == "ok" and sc is not None:
            broken = sc.violations()
            if broken:
                verdict = f"infeasible:{broken[0][0]}"
                detail = "; ".join(f"{code}: {text}" for code, text in broken)
            return self._finish_trial(asked, verdict=verdict, values=values,
                                      state=optuna_io.COMPLETE, ms=ms, sc=sc, role=role,
                                      extra_metrics=extra, detail=detail)
        if verdict.startswith("rolled_back"):
            state = optuna_io.PRUNED
            cons = {"safety": NEVER_KEPT}
        elif verdict.startswith("pruned"):
            state, cons = optuna_io.PRUNED, {}
        else:
            state, cons = optuna_io.FAIL, {}
        return self._finish_trial(asked, verdict=verdict, values=values, state=state, ms=ms,
                                  sc=sc, constraints=cons, role=role, extra_metrics=extra,
                                  detail=detail)

    @property
    def placements(self) -> int:
        """How many study placements a would-be candidate is measured on: up to
        ``budget.candidate_placements``, as far as the baseline was measured on them."""
        return max(self.repeats, min(self.exp.budget.candidate_placements,
                                     len(self.baseline_ms)))

    def _would_confirm(self, ms: list[Measurement], role: str) -> bool:
        """Whether the trial measured so far would go to the confirmation: it meets every
        guardrail and is a warm start, or beats the worst of the top candidates so far."""
        sc = score(ms, self.baseline_ms, self.cfg)
        if len(ms) >= self.placements or not sc.feasible:
            return False
        if role.startswith("warm:"):
            return True
        k = self.exp.budget.confirm_top_k
        top = [c.score for c in studies.candidates(self.study, k) if c.score is not None]
        return len(top) < k or sc.scalar > min(top)

    def _measure_replicates(self, asked: optuna_io.Asked, ms: list[Measurement], c0: Counters,
                            replicates: range | None = None, *,
                            intensify: bool = False) -> tuple[str, str]:
        """Measure the trial's ``replicates`` (default: the study's paired ones) into ``ms``;
        (verdict, detail). Stops at the first safety violation (live or post hoc), when the
        pruner says the trial is clearly worse, or (``intensify``) at the first placement that
        breaks a guardrail: the trial is then no candidate, and the rest would not change that.
        """
        for r in (range(self.repeats) if replicates is None else replicates):
            try:
                m = self._measure(r)
            except SafetyAbort as exc:
                c1 = self.cluster.counters()
                ms.append(Measurement(counters_before=c0, counters_after=c1, replicate=r,
                                      duration_s=max(c1.taken_at_s - c0.taken_at_s, 0.0),
                                      notes=[f"aborted by the live monitor: {exc}"]))
                return f"rolled_back:{exc.reason}", exc.detail
            ms.append(m)
            found = judge(m, self.exp.safety, self.window_s)
            if found:
                return f"rolled_back:{found[0].code}", describe(found)
            if intensify:
                if not score(ms, self.baseline_ms, self.cfg).feasible:
                    break
                continue
            if r + 1 < self.repeats and self._pruner() is not None:
                running = score(ms, self.baseline_ms, self.cfg).scalar
                if optuna_io.report(asked, running, r):
                    left = self.repeats - r - 1
                    self.saved_s += left * float(np.mean([x.duration_s for x in ms]))
                    return "pruned:early_stop", (f"running paired score {running:+.3f} after "
                                                 f"{r + 1} of {self.repeats} replicates")
        return "ok", ""

    def _drift_check(self, after_trial: int) -> None:
        """Re-measure the baseline on one replicate and record how far it moved (0 = none)."""
        n = len(study_store.info(self.study).drift)
        r = n % max(self.repeats, 1)
        m = self._measure(r, abort=False)
        sc = score([m], self.baseline_ms, self.cfg)
        drift = study_store.append_drift(self.study, {
            "after_trial": after_trial, "replicate": r, "score": sc.scalar,
            "busbw_norm": sc.busbw_norm, "p99_us": sc.p99_us,
            "pause_us_per_s": sc.pause_us_per_s})
        self.on_event("drift", drift[-1])

    # The end of the study --------------------------------------------------------------------
    def _confirm(self) -> None:
        """Measure the top candidates and the baseline interleaved on fresh placements
        (baseline, candidate 1, candidate 2, ... per placement), save every measurement, and
        judge each candidate from them alone (``objectives.verdict.judge``)."""
        assert self.desc is not None and self.tx is not None
        b = self.exp.budget
        cands = studies.candidates(self.study, b.confirm_top_k)
        labels = {f"warm:{label}" for label, _ in self.warm}
        cands += [o for o in studies.outcomes(self.study)
                  if o.role in labels and o.candidate
                  and o.values not in [c.values for c in cands]]
        if b.confirm_repeats <= 0:
            return
        seeds = self._confirmation_seeds()
        n = len(seeds) if cands else 0
        self.on_event("confirm", {"candidates": [c.number for c in cands], "repeats": n})
        trial_ms: dict[int, list[Measurement]] = {c.number: [] for c in cands}
        base_ms: list[Measurement] = []
        problem: dict[int, str] = {c.number: "" for c in cands}
        folder = self.trial_dir / "confirmation"
        for i, rep in enumerate(seeds[:n]):
            base = self._measure(rep, abort=False)
            base_ms.append(base)
            self._save_confirmation(folder / f"baseline-p{rep}.json", base)
            for c in cands:
                if problem[c.number]:
                    continue
                settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                            c.values)
                try:
                    with self.tx.applied(settings, c.number):
                        m = self._measure(rep)
                    found = judge(m, self.exp.safety, self.window_s)
                    if found:
                        problem[c.number] = f"rolled_back:{found[0].code}"
                except SafetyAbort as exc:
                    problem[c.number] = f"rolled_back:{exc.reason}"
                except (ApplyError, MeasurementError) as exc:
                    problem[c.number] = f"failed: {exc}"
                if not problem[c.number]:
                    trial_ms[c.number].append(m)
                    self._save_confirmation(folder / f"trial-{c.number:04d}-p{rep}.json", m)
                self.on_event("confirm_step", {"done": i * len(cands) + cands.index(c) + 1,
                                               "total": n * len(cands)})
        checks = judge_confirmation(base_ms, trial_ms, problem, self.cfg)
        win = winner_of(checks)
        conf = Confirmation(candidates=checks, paired_repeats=n, winner=win, seeds=seeds[:n],
                            placements=self.desc.facts.get("placements", "vary"))
        study_store.record(self.study, confirmation=conf.stored(str(folder)))
        self.on_event("confirmed", {"confirmation": conf})

    def _confirmation_seeds(self) -> list[int]:
        """The study's confirmation placements: drawn once, recorded, kept across a resume."""
        seeds = study_store.info(self.study).confirmation_seeds
        if len(seeds) < self.exp.budget.confirm_repeats:
            seeds = confirmation_seeds(self.exp.budget.confirm_repeats, self.study_name,
                                       self.exp.sampler.seed)
            study_store.record(self.study, confirmation_seeds=seeds)
        return [int(x) for x in seeds][:self.exp.budget.confirm_repeats]

    @staticmethod
    def _save_confirmation(path: Path, m: Measurement) -> None:
        """One confirmation measurement, for audit (every effect is recomputable from them)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_stripped(m).model_dump_json(indent=1), encoding="utf-8")

    def _keep_winner(self) -> str:
        """Re-apply the confirmed winner's settings and verify them; journal ``kept``."""
        assert self.desc is not None and self.tx is not None
        win = studies.winner(self.study)
        if win is None:
            return "baseline"
        settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics,
                                    win.values)
        self.tx.keep(settings, win.number)
        study_store.record(self.study, kept_trial=win.number)
        return f"kept:{win.number}"

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
                self.space = self.space.bounded(self._kmax_ceiling())
                self.poll_s = poll_intervals(self.desc.facts.get("counter_poll_s", ""))
                self.baseline_settings = self.cluster.snapshot()
                self.baseline_values = self.baseline_settings.flat()
                self.tx = Transactions(self.cluster, self.journal, self.study_name,
                                       self.baseline_settings, self.guard.shield)
                self._open_study(resume)
                study_store.record(self.study, canary={"switches": self.desc.canary_switches,
                                                       "nics": self.desc.canary_nics})
                self._ensure_baseline()
                self._attach_twin()
                self._start_tracking()
                self.backfill()
            t0 = time.monotonic()
            used = self._budget_used()
            self.on_event("start", {"study": self.study_name, "total": self.exp.budget.trials,
                                    "done": used, "resume": resume})
            every = self.exp.budget.baseline_every
            while True:
                self.guard.check()
                has_baseline = bool(self.baseline_ms)
                if has_baseline and self._budget_spent(used):
                    break
                if has_baseline and time.monotonic() - t0 > self.exp.budget.wall_time_s:
                    self.on_event("wall_time", {"elapsed_s": time.monotonic() - t0})
                    break
                with self.guard.shield():
                    asked = optuna_io.ask(self.study, self.dists)
                role = study_store.tags(asked.trial).role
                if role == "baseline":
                    out = self._run_baseline(asked)
                else:
                    out = self._run_trial(asked, role)
                    used += 1
                    if every and used % every == 0 and used < self.exp.budget.trials:
                        self._drift_check(out.number)
                self.on_event("trial", {"outcome": out,
                                        "best": studies.best_unconfirmed(self.study),
                                        "used": used})
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
                    if self.tx is not None:
                        self.tx.restore()
                        if (self.keep_best and not failed and not interrupted
                                and self.study is not None):
                            final = self._keep_winner()
                finally:
                    self._end_tracking(interrupted, failed)
                    self.guard.uninstall()
        return self.result(final)

    def _end_tracking(self, interrupted: str | None, failed: bool) -> None:
        if self.study is None or self.tracker.parent_run_id is None:
            return
        self.backfill()
        res = self.result("-", read_devices=False)
        counts: dict[str, float] = dict.fromkeys(TRIAL_COUNTS, 0)
        for t in res.trials:
            key = f"trials_{kind(t.verdict)}"
            if key in counts:
                counts[key] += 1
        metrics = dict(counts, canary_time_saved_s=self.saved_s)
        sampler = self.study.sampler
        if getattr(sampler, "twin_trials", None) is not None:
            metrics["twin_trials"] = study_store.twin_trials(self.study) or 0
            folder = self.results / self.study_name / "twin"
            folder.mkdir(parents=True, exist_ok=True)
            name = self.twin_key.removeprefix(study_store.TWIN_TRIALS).replace(":", "-")
            (folder / f"trials{name}.json").write_text(json.dumps(sampler.records(), indent=1))
            self.tracker.log_dir(folder, "twin")
        if res.rolled_back_share is not None:
            metrics["rolled_back_share"] = res.rolled_back_share
        if res.best is not None and res.best.score is not None:
            metrics["best_score"] = res.best.score
            metrics["best_trial"] = res.best.number
        summary: dict[str, Any] = {"study": self.study_name, "interrupted": interrupted,
                                   "failed": failed, "repeats": self.repeats,
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
            if self.summarize is not None:
                try:
                    more, summary["retune"] = self.summarize(self.study)
                    metrics.update(more)
                except Exception as exc:  # a summary must never cost the study's run
                    summary["retune"] = {"error": f"{type(exc).__name__}: {exc}"}
        status = "FAILED" if failed else ("KILLED" if interrupted else "FINISHED")
        if not interrupted:
            self._log_report()
        if res.confirmation is not None and res.confirmation.folder:  # every number, auditable
            self.tracker.log_dir(res.confirmation.folder, "confirmation")
        self.tracker.end_study(metrics, summary, status=status)

    def result(self, final: str = "baseline", *, read_devices: bool = True) -> StudyResult:
        info = study_store.info(self.study)
        final_settings = None
        if read_devices and self.desc is not None:
            final_settings = self.cluster.read_back()
        return StudyResult(
            study=self.study_name, storage=self.exp.storage_url,
            tracking_uri=self.exp.tracking_uri if self.tracker.enabled else "",
            parent_run_id=self.tracker.parent_run_id,
            mode=self.exp.objective.mode, baseline=studies.baseline(self.study),
            best=studies.best_unconfirmed(self.study), winner=studies.winner(self.study),
            pareto=studies.pareto(self.study), trials=studies.outcomes(self.study),
            final=final, final_settings=final_settings,
            confirmation=studies.confirmation(self.study),
            tracking_failures=list(self.tracker.failures),
            mlflow_experiment_id=self.tracker.experiment_id, repeats=info.repeats,
            noise=info.noise, pruned_saved_s=self.saved_s,
            startup_trials=info.startup_trials)


def default_study_name(exp: Experiment) -> str:
    return f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


__all__ = ["Interrupted", "StudyRunner", "TunerError", "default_study_name", "score_config"]
