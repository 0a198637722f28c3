"""What differs between a process that runs a study alone and a worker of a shared study.

``StudyRunner`` composes the phases (``baseline``, ``trial``, ``confirm``, ``tracking``) the
same way for both; a ``Policy`` answers the questions on which they differ. Call order, all on
the runner's (main) thread: ``bind`` once; in set-up ``prepare``, ``open_study``,
``ensure_baseline``, ``tracking``; per loop step ``budget_spent``, then ``owns_baseline`` for a
queued baseline and ``running`` around each trial; ``backfills`` whenever MLflow is back-filled.
``SoloPolicy`` is ``ecntune run``'s; ``tuner.worker.SlicePolicy`` a scale-out worker's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from tuner import __version__, optuna_io, study_store
from tuner.errors import RollbackError
from tuner.phases import baseline
from tuner.signals import SignalGuard

if TYPE_CHECKING:
    from tuner.loop import StudyRunner


class Policy(Protocol):
    @property
    def guard(self) -> SignalGuard:
        """The flag the loop and every measurement check."""

    @property
    def twin_key(self) -> str:
        """Where this process counts its twin trials (``study_store.TWIN_TRIALS...``)."""

    @property
    def slice(self) -> str | None:
        """The canary slice this process tunes (MLflow tag ``ecntune.slice``); None: all."""

    @property
    def concludes(self) -> bool:
        """Does this process check drift, confirm and write the study report?"""

    def bind(self, ctx: StudyRunner) -> None:
        """The runner whose study this policy shares (read after ``open_study``)."""

    def prepare(self) -> None:
        """Deal with a change the journal shows open (a killed run's) before anything else."""

    def open_study(self, resume: bool) -> Any:
        """The Optuna study: created, loaded, or joined."""

    def ensure_baseline(self) -> None:
        """Trial 0: enqueued, measured now, or loaded (``baseline.adopt``)."""

    def budget_spent(self, used: int) -> bool:
        """Stop asking? ``used``: this process's count of finished searched trials."""

    def owns_baseline(self, asked: optuna_io.Asked) -> bool:
        """Is a baseline handed out by Optuna this process's to measure as trial 0?"""

    def running(self, asked: optuna_io.Asked) -> AbstractContextManager[None]:
        """Around one trial, from its ask to its tell."""

    def tracking(self) -> AbstractContextManager[None]:
        """Around the parent run's creation (or re-opening)."""

    def backfills(self, t: Any) -> bool:
        """Is a finished trial this process's to back-fill into MLflow?"""


class SoloPolicy:
    """``ecntune run``/``resume``: the only process on the canary and its study."""

    twin_key = study_store.TWIN_TRIALS
    slice = None
    concludes = True

    def __init__(self) -> None:
        self.guard = SignalGuard()
        self.ctx: StudyRunner | None = None

    def bind(self, ctx: StudyRunner) -> None:
        self.ctx = ctx

    def prepare(self) -> None:
        """A change left open by a killed run: the canary may be on trial settings. Refuse to
        tune on top of it; `ecntune recover` restores (and verifies) its baseline first."""
        assert self.ctx is not None
        journal = self.ctx.journal
        entry = journal.dirty()
        if entry is not None:
            raise RollbackError(
                f"journal {journal.path} has an open change (study {entry.study}, trial "
                f"{entry.trial}) on {', '.join(entry.targets)}: the canary may not be on its "
                f"baseline. Run `ecntune recover --results {self.ctx.results}` first")

    def open_study(self, resume: bool) -> Any:
        ctx = self.ctx
        assert ctx is not None
        exp = ctx.exp
        multi = exp.objective.mode == "multi"
        sampler = optuna_io.make_sampler(
            exp.sampler, multi, pfc_alarm_us_per_s=exp.objective.guardrails.max_pfc_pause_us_per_s)
        if resume:
            study = optuna_io.load_study(ctx.study_name, exp.storage_url, sampler, ctx.pruner())
            stale, alive = optuna_io.fail_stale(study)
            if stale:
                ctx.on_event("stale", {"trials": stale})
            if alive:  # another live run's (a shared study), or one this host cannot judge
                ctx.on_event("running_elsewhere", {"trials": alive})
            return study
        dirs = ["maximize"] if not multi else ["maximize", "minimize"]
        study = optuna_io.create_study(ctx.study_name, exp.storage_url, dirs, sampler,
                                       ctx.pruner())
        study_store.created(study, experiment_yaml=ctx.exp_yaml, experiment_name=exp.name,
                            mode=exp.objective.mode, ecntune_version=__version__,
                            startup_trials=exp.sampler.random_startup,
                            # the effective budget (--trials included): what `resume` continues
                            trials_budget=exp.budget.trials)
        if ctx.lineage:
            study_store.record(study, lineage=ctx.lineage)
        if ctx.findings is not None:
            study_store.record(study, findings=ctx.findings,
                               findings_accepted=ctx.findings_accepted)
        return study

    def ensure_baseline(self) -> None:
        assert self.ctx is not None
        baseline.enqueue(self.ctx)

    def budget_spent(self, used: int) -> bool:
        assert self.ctx is not None
        return used >= self.ctx.exp.budget.trials

    def owns_baseline(self, asked: optuna_io.Asked) -> bool:
        return True

    def running(self, asked: optuna_io.Asked) -> AbstractContextManager[None]:
        return nullcontext()

    def tracking(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backfills(self, t: Any) -> bool:
        return True
