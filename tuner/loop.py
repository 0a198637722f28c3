"""The study: set-up, then trial 0, the searched trials and the end, each phase in
``tuner.phases``; what differs between ``ecntune run`` and a scale-out worker is a ``Policy``.

Set-up: the policy deals with an open journal change and opens (or joins) the study; the
cluster's canary is snapshotted as the baseline, trial 0 is enqueued, measured or loaded
(``phases.baseline``), the digital twin attached and the MLflow parent run opened. Then, until
the policy says the budget is spent (or the wall time is up), the next trial is asked and run:
trial 0 (``phases.baseline.run``) or a searched one (``phases.trial.run``); every
``budget.baseline_every`` trials the baseline is measured again (drift). At the end the top
candidates and the baseline are measured interleaved on fresh paired replicates and the winner
is confirmed or not (``phases.confirm``); a worker of a shared study only explores.

Signals (``tuner.signals``): the first SIGINT/SIGTERM only sets a flag; the running measurement
stops at its next monitor poll, the canary is restored, the in-flight trial is told FAIL
(``interrupted``) and ``Interrupted`` is raised. A second signal interrupts at once, except
while a restore runs. At the end, on interrupt or on failure the canary is restored to the
baseline; with ``keep_best`` the confirmed winner's settings are re-applied and verified
instead (normal end only, never an unconfirmed trial).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objectives.measurement import Measurement
from objectives.score import ScoreConfig
from safety.journal import Journal
from safety.limits import PfcThreshold, kmax_ceiling
from safety.monitor import storm_window_s
from tuner import optuna_io, study_store
from tuner import study as studies
from tuner.errors import TunerError
from tuner.phases import baseline, confirm, tracking, trial
from tuner.phases.baseline import noise_of, repeats_for
from tuner.phases.confirm import confirmation_seeds
from tuner.phases.policy import Policy, SoloPolicy
from tuner.phases.trial import NEVER_KEPT
from tuner.settings import Settings
from tuner.signals import Interrupted, SignalGuard
from tuner.space import SearchSpace, build_space
from tuner.study import StudyResult, TrialOutcome
from tuner.tracking import Tracker
from tuner.transaction import Transactions

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster, ClusterDescription
    from tuner.experiment import Experiment
    from tuner.screen import TwinScreen


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


Event = Callable[[str, dict[str, Any]], None]


class StudyRunner:
    """Runs (or resumes) one study on one cluster. Not thread-safe; one per process.

    Holds the state the phases share (the study, the canary's baseline, its paired
    replicates, the guarded-change machinery); ``policy`` defaults to ``SoloPolicy``.
    """

    def __init__(self, exp: Experiment, exp_yaml: str, cluster: Cluster, *, study_name: str,
                 tracker: Tracker | None = None, keep_best: bool = False,
                 on_event: Event | None = None,
                 warm: list[tuple[str, dict[str, int]]] | None = None,
                 lineage: dict[str, str] | None = None,
                 summarize: Callable[[Any], tuple[dict[str, float], dict[str, Any]]]
                 | None = None, findings: list[dict[str, Any]] | None = None,
                 findings_accepted: bool = False, policy: Policy | None = None) -> None:
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
        self.policy: Policy = policy or SoloPolicy()
        self.policy.bind(self)
        self.guard = self.policy.guard
        self.study: Any = None
        self.desc: ClusterDescription | None = None
        self.baseline_settings: Settings | None = None
        self.twin_calibration: dict[str, Any] = {}  # the twin's values ecntune calibrate set
        self.baseline_values: dict[str, int] = {}
        self.baseline_ms: list[Measurement] = []  # one per paired replicate
        self.repeats = exp.budget.repeats if isinstance(exp.budget.repeats, int) else 0
        self.window_s = storm_window_s(exp.safety, None)
        self.tx: Transactions | None = None
        self.screen: TwinScreen | None = None
        self.poll_s: dict[str, float] = {}  # switch counter poll interval per family
        self.saved_s = 0.0  # canary time early stopping saved (measurement seconds)

    def pruner(self) -> Any:
        """The paired median pruner (None: early stopping is off)."""
        b = self.exp.budget
        if self.exp.objective.mode == "multi" or b.prune_margin <= 0:
            return None
        return optuna_io.PairedMedianPruner(b.prune_margin,
                                            max(self.exp.sampler.startup_trials, 3))

    def kmax_ceiling(self) -> int | None:
        """Kmax's ECN-before-PFC ceiling from the cluster's PFC threshold (None: unknown)."""
        assert self.desc is not None
        pfc = PfcThreshold.from_facts(self.desc.facts)
        return kmax_ceiling(pfc, self.exp.safety) if pfc else None

    def backfill(self) -> int:
        """Log finished trials MLflow does not have yet (``phases.tracking.backfill``)."""
        return tracking.backfill(self)

    def run(self, *, resume: bool = False) -> StudyResult:
        """Run the study to its budget; see the module docstring for what happens on signals."""
        self.guard.install()
        interrupted: str | None = None
        failed = False
        final = "baseline"
        try:
            with self.guard.shield():
                self._set_up(resume)
            self._search(resume)
            if self.policy.concludes:
                confirm.run(self)
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
                            final = confirm.keep_winner(self)
                finally:
                    tracking.end(self, interrupted, failed)
                    self.guard.uninstall()
        return self.result(final)

    def _set_up(self, resume: bool) -> None:
        """The canary's baseline snapshot, the study, trial 0, the twin, the parent run."""
        self.policy.prepare()
        self.desc = self.cluster.describe()
        self.space = self.space.bounded(self.kmax_ceiling())
        self.poll_s = poll_intervals(self.desc.facts.get("counter_poll_s", ""))
        self.baseline_settings = self.cluster.snapshot()
        self.baseline_values = self.baseline_settings.flat()
        self.tx = Transactions(self.cluster, self.journal, self.study_name,
                               self.baseline_settings, self.guard.shield)
        self.study = self.policy.open_study(resume)
        study_store.record(self.study, canary={"switches": self.desc.canary_switches,
                                               "nics": self.desc.canary_nics})
        study_store.record_snapshot(self.study, self.baseline_settings, self.policy.slice)
        self.policy.ensure_baseline()
        self._attach_twin()
        with self.policy.tracking():
            tracking.start(self)
        self.backfill()

    def _search(self, resume: bool) -> None:
        """Ask and run trials until the budget or the wall time is spent."""
        t0 = time.monotonic()
        used = self._budget_used()
        self.on_event("start", {"study": self.study_name, "total": self.exp.budget.trials,
                                "done": used, "resume": resume})
        every = self.exp.budget.baseline_every
        while True:
            self.guard.check()
            has_baseline = bool(self.baseline_ms)
            if has_baseline and self.policy.budget_spent(used):
                return
            if has_baseline and time.monotonic() - t0 > self.exp.budget.wall_time_s:
                self.on_event("wall_time", {"elapsed_s": time.monotonic() - t0})
                return
            with self.guard.shield():
                asked = optuna_io.ask(self.study, self.dists)
            role = study_store.tags(asked.trial).role
            if role == "baseline" and self.policy.owns_baseline(asked):
                out = baseline.run(self, asked)
            elif role == "baseline":  # another process's trial 0: this one has its own
                out = self._trial(asked, "proposal")
            else:
                out = self._trial(asked, role)
                used += 1
                if (every and used % every == 0 and used < self.exp.budget.trials
                        and self.policy.concludes):
                    baseline.drift_check(self, out.number)
            self.on_event("trial", {"outcome": out, "best": studies.best_unconfirmed(self.study),
                                    "used": used})

    def _trial(self, asked: optuna_io.Asked, role: str) -> TrialOutcome:
        with self.policy.running(asked):
            return trial.run(self, asked, role)

    def _budget_used(self) -> int:
        tagged = ((t, study_store.tags(t)) for t in optuna_io.trials(self.study))
        return sum(1 for t, tg in tagged
                   if tg.role != "baseline" and t.state.name in ("COMPLETE", "PRUNED", "FAIL")
                   and tg.verdict != "interrupted")

    def _attach_twin(self) -> None:
        """The digital twin, for the screen and for ``sampler: twin`` (one twin, one
        measurement per setting, shared by both)."""
        attach = getattr(self.study.sampler, "attach", None)
        if self.exp.screen.mode != "twin" and attach is None:
            return
        from tuner.screen import TwinScreen

        twin = TwinScreen(self.exp, self.cfg,
                          recorded=study_store.info(self.study).twin_calibration)
        if twin.calibration is not None:  # `ecntune calibrate` fitted this twin
            study_store.record(self.study, twin_calibration=twin.calibration)
            self.twin_calibration = twin.calibration["overrides"]
        if self.exp.screen.mode == "twin":
            self.screen = twin
        if attach is not None:
            attach(lambda params: twin.evaluate(self.space.values(params, self.baseline_values)),
                   lambda params: self.space.values(params, self.baseline_values))

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


__all__ = ["NEVER_KEPT", "Interrupted", "SignalGuard", "StudyRunner", "TunerError",
           "confirmation_seeds", "default_study_name", "noise_of", "poll_intervals",
           "repeats_for", "score_config"]
