"""One worker of a shared study: the trial loop on one canary slice, next to other workers.

Workers on any number of machines share one Optuna study through its storage (PostgreSQL for
several machines) and one MLflow parent run; nothing else coordinates them. A worker is
``tuner.loop.StudyRunner`` with a ``SlicePolicy``, which adds:

* **its slice, leased.** The slice's lease (``tuner.lease``) is held for the worker's life and
  renewed from a thread; a lost lease stops the running measurement at its next poll, restores
  the slice and ends the worker (``LeaseLost``). A lease taken over from a dead worker, or a
  slice journal with an open change, means the slice is restored first.
* **its slice's own baseline.** Trial 0 of each slice is created for this worker alone (never
  queued, so no other worker picks it up), measured on the slice and kept as the study user
  attr ``baseline_measurement:<slice>``; the slice's trials are judged and scored against it.
* **the slice on every trial**: Optuna user attr ``slice`` and MLflow tag ``ecntune.slice``.
* **dead workers' trials.** Each running trial beats Optuna's heartbeat from the lease thread;
  on every beat the worker also fails the trials whose heartbeat stopped and Optuna's retry
  callback re-queues their params (``optuna_io.fail_dead``); the failed one gets the verdict
  ``failed:worker_died``.
* **a shared budget, spent exactly** (``budget_step``): ``budget.trials`` searched trials
  finish, a dead worker's trial counting once, by its re-run. Checking the count and asking
  the next trial is one step among workers (the ``_ask`` pseudo-slice lock), so parallel
  workers never overshoot; and a worker whose budget is spent waits while other workers'
  trials run, so that if one of those workers dies its re-queued trial is still run. Workers
  therefore exit together, with nothing left RUNNING or re-queued.
* **parallel proposals**: TPE's constant liar (the default sampler) treats the other workers'
  running trials as bad, so they do not all try the same point.

Drift checks, the confirmation and the study report are ``ecntune run``'s
(``SlicePolicy.concludes``), and so is ``--keep-best``: workers only explore.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Literal

from safety.rollback import restore
from tuner import __version__, optuna_io, study_store
from tuner.errors import ConfigError
from tuner.lease import Lease, LeaseKeeper
from tuner.loop import StudyRunner
from tuner.phases import baseline
from tuner.signals import Interrupted, SignalGuard
from tuner.study import StudyResult

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster
    from tuner.experiment import Experiment

# Pseudo-slices used as locks: one worker at a time creates Optuna's tables / the parent run.
STORAGE_INIT_LOCK = "_storage_init"
PARENT_RUN_LOCK = "_mlflow_parent_run"
ASK_LOCK = "_ask"  # held from the budget check to the ask, so workers never overshoot


def budget_step(trials: Iterable[Any], budget: int) -> Literal["ask", "wait", "stop"]:
    """What a worker of a shared study does next: ``ask`` a trial, ``wait`` or ``stop``.

    The budget counts searched trials (not baselines, not ``interrupted`` ones) that run or
    finished; a trial whose worker died and whose params were re-queued is counted by its copy
    (WAITING until a worker takes it), not twice. A re-queued copy is always run, even when the
    count is reached (Optuna hands WAITING trials out first). A spent budget with searched
    trials still running elsewhere means ``wait``: their workers may die, and then their
    re-queued copies are this worker's to run.
    """
    trials = list(trials)
    searched = [t for t in trials if study_store.tags(t).role != "baseline"
                and study_store.tags(t).verdict != "interrupted"]
    retried = {n for t in trials for n in study_store.retries(t)}
    requeued = [t for t in searched if t.state.name == "WAITING" and study_store.is_retry(t)]
    counted = sum(1 for t in searched if t.number not in retried
                  and t.state.name in ("RUNNING", "COMPLETE", "PRUNED", "FAIL"))
    if requeued or counted + len(requeued) < budget:
        return "ask"
    return "wait" if any(t.state.name == "RUNNING" for t in searched) else "stop"


def warm_up(exp: Experiment) -> None:
    """Compile rocesim's kernel before the worker takes a lease (sim backend): numba holds the
    GIL while it compiles (minutes on a cold cache, several workers at once), which would
    starve the thread that renews the lease and beats the trial's heartbeat. One measurement
    on a private in-memory copy of the fabric: no slice device is touched."""
    if exp.fabric.backend != "sim":
        return
    from tuner.cluster.sim import SimCluster

    SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current),
               name=exp.name).measure(exp.workload)


class LeaseLost(Interrupted):
    """The slice's lease expired or was taken: the worker stopped (slice restored)."""

    def __init__(self, slice_name: str, why: str) -> None:
        super().__init__("lease-lost")
        self.args = (f"slice {slice_name}: lease lost ({why}); the slice was restored and the "
                     "worker stopped",)


class _LeaseGuard(SignalGuard):
    """The loop's signal flag, which a lost lease raises too (at the next monitor poll)."""

    def __init__(self, slice_name: str) -> None:
        super().__init__()
        self.slice_name = slice_name
        self.keeper: LeaseKeeper | None = None

    def check(self) -> None:
        if self.keeper is not None and self.keeper.lost.is_set():
            raise LeaseLost(self.slice_name, self.keeper.error or "not renewed")
        super().check()


class SlicePolicy:
    """``tuner.phases.policy.Policy`` for one slice of a shared study (module docstring)."""

    concludes = False  # drift, confirmation and the report are ``ecntune run``'s

    def __init__(self, slice_name: str, keeper: LeaseKeeper) -> None:
        self.slice = slice_name
        self.keeper = keeper
        # Each worker counts its own twin trials (a shared key would keep the last writer's).
        self.twin_key = f"{study_store.TWIN_TRIALS}:{slice_name}:{uuid.uuid4().hex[:8]}"
        self.leases = keeper.leases
        self.heartbeat_s = max(1, round(self.leases.ttl_s / 3))
        self.guard = _LeaseGuard(slice_name)
        self.guard.keeper = keeper
        keeper.on_tick = self._tick
        self.current: int | None = None  # the trial whose heartbeat the lease thread beats
        self.died: list[int] = []  # trials of dead workers this worker failed and re-queued
        self._died_unlogged = False  # some of them not logged to MLflow yet (main thread)
        self._ask_lease: Lease | None = None
        self._lock = threading.Lock()
        self._ctx: StudyRunner | None = None

    def bind(self, ctx: StudyRunner) -> None:
        self._ctx = ctx

    @property
    def ctx(self) -> StudyRunner:
        assert self._ctx is not None, "SlicePolicy used before StudyRunner bound it"
        return self._ctx

    # The lease thread ------------------------------------------------------------------------
    def _tick(self) -> None:
        """Every lease renewal: beat the running trial's heartbeat, fail dead workers' ones."""
        study = self._ctx.study if self._ctx is not None else None
        if study is None:
            return
        with self._lock:
            if self.current is not None:
                optuna_io.record_heartbeat(study, self.current)
            self._janitor()

    def _janitor(self) -> None:
        for n in optuna_io.fail_dead(self.ctx.study):
            self.died.append(n)
            self._died_unlogged = True
            self.ctx.on_event("worker_died", {"trial": n})

    def _log_died(self) -> None:
        """Log the trials this worker failed for their dead workers to MLflow (each is failed
        by exactly one janitor, and ``backfill`` skips what MLflow already has, so each is
        logged once; the lease thread never talks to MLflow)."""
        with self._lock:
            pending, self._died_unlogged = self._died_unlogged, False
        if pending:
            self.ctx.backfill()

    # Set-up ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        """The worker holds the slice's lease: an open change in the slice's journal is a dead
        worker's, so put the slice back on that change's baseline (verified) instead."""
        journal = self.ctx.journal
        entry = journal.dirty()
        if entry is None:
            return
        report = restore(self.ctx.cluster, entry.baseline)
        journal.end(entry.id, "restored:recover")
        self.ctx.on_event("slice_restored", {"slice": self.slice, "trial": entry.trial,
                                             "seconds": report.seconds})

    def open_study(self, resume: bool) -> Any:
        ctx = self.ctx
        multi = ctx.exp.objective.mode == "multi"
        # Each worker its own seed: with one seed every worker would draw the same startup
        # points (constant liar only steers the model-based proposals).
        spec = ctx.exp.sampler
        if spec.seed is not None:
            spec = spec.model_copy(update={"seed": (spec.seed + zlib.crc32(self.slice.encode()))
                                                  % 2**32})
        sampler = optuna_io.make_sampler(
            spec, multi, pfc_alarm_us_per_s=ctx.exp.objective.guardrails.max_pfc_pause_us_per_s)
        storage = ctx.exp.storage_url
        with self.leases.mutex(STORAGE_INIT_LOCK):  # Optuna's table creation is not concurrent
            optuna_io.open_storage(storage, heartbeat_s=self.heartbeat_s)
        pruner = ctx.pruner()
        try:
            ctx.study = optuna_io.load_study(ctx.study_name, storage, sampler, pruner,
                                             heartbeat_s=self.heartbeat_s)
        except ConfigError:  # the first worker creates it; a twin may win the race
            dirs = ["maximize"] if not multi else ["maximize", "minimize"]
            try:
                ctx.study = optuna_io.create_study(ctx.study_name, storage, dirs, sampler,
                                                   pruner, heartbeat_s=self.heartbeat_s)
            except ConfigError:
                ctx.study = optuna_io.load_study(ctx.study_name, storage, sampler, pruner,
                                                 heartbeat_s=self.heartbeat_s)
            else:
                study_store.created(ctx.study, experiment_yaml=ctx.exp_yaml,
                                    experiment_name=ctx.exp.name,
                                    mode=ctx.exp.objective.mode, ecntune_version=__version__,
                                    startup_trials=ctx.exp.sampler.random_startup, shared=True)
                baseline.enqueue_warm_starts(ctx)  # once per study, for any worker to take
        with self._lock:
            self._janitor()
        return ctx.study

    def ensure_baseline(self) -> None:
        """This slice's trial 0: loaded if done, else measured now (see the module docstring).
        Its paired replicates are the ones every trial on this slice is scored against."""
        ctx = self.ctx
        done = any(study_store.tags(t).role == "baseline"
                   and study_store.tags(t).slice == self.slice and t.state.name == "COMPLETE"
                   for t in optuna_io.trials(ctx.study))
        stored, repeats = study_store.baseline(ctx.study, self.slice)
        if done and stored:
            baseline.adopt(ctx, stored, repeats or len(stored))
            return
        asked = optuna_io.ask_fixed(ctx.study, ctx.space.params_of(ctx.baseline_values),
                                    ctx.dists, {"role": "baseline", "slice": self.slice})
        with self.running(asked):
            baseline.run(ctx, asked, self.slice)

    def tracking(self) -> AbstractContextManager[None]:
        """One parent run for all workers: the first creates it, the others re-open it."""
        if not self.ctx.tracker.enabled:
            return nullcontext()
        return self.leases.mutex(PARENT_RUN_LOCK)

    # One trial -------------------------------------------------------------------------------
    def owns_baseline(self, asked: optuna_io.Asked) -> bool:
        """A queued baseline of a study `ecntune run` created is a proposal here: this
        worker's trial 0 is its own."""
        return study_store.tags(asked.trial).slice == self.slice

    @contextmanager
    def running(self, asked: optuna_io.Asked) -> Iterator[None]:
        """The trial is asked (RUNNING, counted): the next worker may ask; the lease thread
        beats its heartbeat until it is told."""
        self.release_ask()
        study_store.tag(asked.trial, slice=self.slice)
        with self._lock:
            self.current = asked.number
            optuna_io.record_heartbeat(self.ctx.study, asked.number)
        try:
            yield
        finally:
            with self._lock:
                self.current = None

    def budget_spent(self, used: int) -> bool:
        """``budget_step`` over the study; on ``ask`` the ask lock stays held until the trial
        is asked (``running``), on ``wait`` the worker polls, beating its lease meanwhile."""
        while True:
            self.guard.check()
            self._log_died()
            self._take_ask()
            with self._lock:  # not between a janitor's fail and its re-queue of a dead trial
                step = budget_step(optuna_io.trials(self.ctx.study),
                                   self.ctx.exp.budget.trials)
            if step == "ask":
                return False
            self.release_ask()
            if step == "stop":
                return True
            end = time.monotonic() + min(self.heartbeat_s, 5)  # each poll reads the study
            while time.monotonic() < end:
                self.guard.check()
                time.sleep(0.1)

    def _take_ask(self) -> None:
        wait_s = 3 * self.leases.ttl_s  # a dead holder's lock expires after one TTL
        deadline = time.monotonic() + wait_s
        while (lease := self.leases.acquire(ASK_LOCK)) is None:
            if time.monotonic() > deadline:
                raise ConfigError(f"study {self.ctx.study_name}: {ASK_LOCK} held by another "
                                  f"worker for over {wait_s:.0f} s")
            self.guard.check()
            time.sleep(0.02)
        self._ask_lease = lease

    def release_ask(self) -> None:
        if self._ask_lease is not None:
            lease, self._ask_lease = self._ask_lease, None
            self.leases.release(lease)

    # MLflow ----------------------------------------------------------------------------------
    def backfills(self, t: Any) -> bool:
        """This slice's trials only: two workers back-filling one trial would log it twice
        (the other slices' are their workers' to log; a dead worker's, the janitor's that
        failed it)."""
        tags = study_store.tags(t)
        if tags.verdict == "failed:worker_died":
            return t.number in self.died
        return tags.slice == self.slice


class SliceWorker:
    """A ``StudyRunner`` with a ``SlicePolicy``: one slice of a shared study.

    ``exp`` is the slice's experiment (``tuner.slices.for_slice``); ``exp_yaml`` the shared
    experiment file, stored with the study when this worker is the one that creates it.
    """

    def __init__(self, exp: Experiment, exp_yaml: str, cluster: Cluster, *, study_name: str,
                 slice_name: str, keeper: LeaseKeeper, **kw: Any) -> None:
        self.policy = SlicePolicy(slice_name, keeper)
        self.runner = StudyRunner(exp, exp_yaml, cluster, study_name=study_name,
                                  policy=self.policy, **kw)

    @property
    def study(self) -> Any:
        return self.runner.study

    def run(self, *, resume: bool = False) -> StudyResult:
        """The loop, while ``keeper`` (started by the caller right after the lease was
        acquired) renews the lease."""
        try:
            return self.runner.run(resume=resume)
        except Interrupted as exc:
            if exc.signame == "lease-lost":  # the loop re-raises every stop as Interrupted
                raise LeaseLost(self.policy.slice,
                                self.policy.keeper.error or "not renewed") from None
            raise
        finally:
            self.policy.release_ask()
