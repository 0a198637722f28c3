"""One worker of a shared study: the trial loop on one canary slice, next to other workers.

Workers on any number of machines share one Optuna study through its storage (PostgreSQL for
several machines) and one MLflow parent run; nothing else coordinates them. What a worker adds
to ``tuner.loop.StudyRunner``:

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

Confirmation repeats and ``--keep-best`` are for ``ecntune run``; workers only explore.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from objectives.measurement import Measurement
from safety.rollback import restore
from tuner import __version__, optuna_io, study_store
from tuner.errors import ConfigError
from tuner.lease import Lease, LeaseKeeper
from tuner.loop import Interrupted, SignalGuard, StudyRunner, TrialOutcome
from tuner.tracking import TrialRecord

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


class SliceWorker(StudyRunner):
    """``StudyRunner`` for one slice of a shared study (see the module docstring).

    ``exp`` is the slice's experiment (``tuner.slices.for_slice``); ``exp_yaml`` the shared
    experiment file, stored with the study when this worker is the one that creates it.
    """

    def __init__(self, exp: Experiment, exp_yaml: str, cluster: Cluster, *, study_name: str,
                 slice_name: str, keeper: LeaseKeeper, **kw: Any) -> None:
        super().__init__(exp, exp_yaml, cluster, study_name=study_name, **kw)
        self.slice = slice_name
        self.keeper = keeper
        # Each worker counts its own twin trials (a shared key would keep the last writer's).
        self.twin_key = f"{study_store.TWIN_TRIALS}:{slice_name}:{uuid.uuid4().hex[:8]}"
        self.leases = keeper.leases
        self.heartbeat_s = max(1, round(self.leases.ttl_s / 3))
        self.lease_guard = _LeaseGuard(slice_name)
        self.lease_guard.keeper = keeper
        self.guard = self.lease_guard
        keeper.on_tick = self._tick
        self.current: int | None = None  # the trial whose heartbeat the lease thread beats
        self.died: list[int] = []  # trials of dead workers this worker failed and re-queued
        self._died_unlogged = False  # some of them not logged to MLflow yet (main thread)
        self._ask_lease: Lease | None = None
        self._lock = threading.Lock()

    # The lease thread ------------------------------------------------------------------------
    def _tick(self) -> None:
        """Every lease renewal: beat the running trial's heartbeat, fail dead workers' ones."""
        if self.study is None:
            return
        with self._lock:
            if self.current is not None:
                optuna_io.record_heartbeat(self.study, self.current)
            self._janitor()

    def _janitor(self) -> None:
        for n in optuna_io.fail_dead(self.study):
            self.died.append(n)
            self._died_unlogged = True
            self.on_event("worker_died", {"trial": n})

    def _log_died(self) -> None:
        """Log the trials this worker failed for their dead workers to MLflow (each is failed
        by exactly one janitor, and ``backfill`` skips what MLflow already has, so each is
        logged once; the lease thread never talks to MLflow)."""
        with self._lock:
            pending, self._died_unlogged = self._died_unlogged, False
        if pending:
            self.backfill()

    def run(self, *, resume: bool = False) -> Any:
        """The loop, while ``keeper`` (started by the caller right after the lease was
        acquired) renews the lease."""
        try:
            return super().run(resume=resume)
        except Interrupted as exc:
            if exc.signame == "lease-lost":  # the loop re-raises every stop as Interrupted
                raise LeaseLost(self.slice, self.keeper.error or "not renewed") from None
            raise
        finally:
            self._release_ask()

    # Set-up ----------------------------------------------------------------------------------
    def _refuse_if_dirty(self) -> None:
        """The worker holds the slice's lease: an open change in the slice's journal is a dead
        worker's, so put the slice back on that change's baseline (verified) instead."""
        entry = self.journal.dirty()
        if entry is None:
            return
        report = restore(self.cluster, entry.baseline)
        self.journal.end(entry.id, "restored:recover")
        self.on_event("slice_restored", {"slice": self.slice, "trial": entry.trial,
                                         "seconds": report.seconds})

    def _open_study(self, resume: bool) -> None:
        multi = self.exp.objective.mode == "multi"
        # Each worker its own seed: with one seed every worker would draw the same startup
        # points (constant liar only steers the model-based proposals).
        spec = self.exp.sampler
        if spec.seed is not None:
            spec = spec.model_copy(update={"seed": (spec.seed + zlib.crc32(self.slice.encode()))
                                                  % 2**32})
        sampler = optuna_io.make_sampler(spec, multi)
        storage = self.exp.storage_url
        with self.leases.mutex(STORAGE_INIT_LOCK):  # Optuna's table creation is not concurrent
            optuna_io.open_storage(storage, heartbeat_s=self.heartbeat_s)
        pruner = self._pruner()
        try:
            self.study = optuna_io.load_study(self.study_name, storage, sampler, pruner,
                                              heartbeat_s=self.heartbeat_s)
        except ConfigError:  # the first worker creates it; a twin may win the race
            dirs = ["maximize"] if not multi else ["maximize", "minimize"]
            try:
                self.study = optuna_io.create_study(self.study_name, storage, dirs, sampler,
                                                    pruner, heartbeat_s=self.heartbeat_s)
            except ConfigError:
                self.study = optuna_io.load_study(self.study_name, storage, sampler, pruner,
                                                  heartbeat_s=self.heartbeat_s)
            else:
                study_store.created(self.study, experiment_yaml=self.exp_yaml,
                                    experiment_name=self.exp.name,
                                    mode=self.exp.objective.mode, ecntune_version=__version__,
                                    startup_trials=self.exp.sampler.random_startup, shared=True)
                self._enqueue_warm_starts()  # once per study, for any worker to take
        with self._lock:
            self._janitor()

    def _ensure_baseline(self) -> None:
        """This slice's trial 0: loaded if done, else measured now (see the module docstring).
        Its paired replicates are the ones every trial on this slice is scored against."""
        done = any(study_store.tags(t).role == "baseline"
                   and study_store.tags(t).slice == self.slice and t.state.name == "COMPLETE"
                   for t in optuna_io.trials(self.study))
        stored, repeats = study_store.baseline(self.study, self.slice)
        if done and stored:
            self.baseline_ms = stored
            self.repeats = repeats or len(stored)
            self._set_window()
            return
        asked = optuna_io.ask_fixed(self.study, self.space.params_of(self.baseline_values),
                                    self.dists, {"role": "baseline", "slice": self.slice})
        self._begin(asked)
        try:
            self._run_baseline(asked)
        finally:
            self._end()
        study_store.save_baseline(self.study, self._stripped_baseline(), self.repeats,
                                  self.slice)

    def _stripped_baseline(self) -> list[Measurement]:
        from tuner.loop import _stripped

        return [_stripped(m) for m in self.baseline_ms]

    def _start_tracking(self) -> None:
        """One parent run for all workers: the first creates it, the others re-open it."""
        if not self.tracker.enabled:
            return
        with self.leases.mutex(PARENT_RUN_LOCK):
            super()._start_tracking()

    # One trial -------------------------------------------------------------------------------
    def _begin(self, asked: optuna_io.Asked) -> None:
        self._release_ask()  # the trial is asked (RUNNING, counted): the next worker may ask
        study_store.tag(asked.trial, slice=self.slice)
        with self._lock:
            self.current = asked.number
            optuna_io.record_heartbeat(self.study, asked.number)

    def _end(self) -> None:
        with self._lock:
            self.current = None

    def _run_trial(self, asked: optuna_io.Asked, role: str) -> TrialOutcome:
        self._begin(asked)
        try:
            return super()._run_trial(asked, role)
        finally:
            self._end()

    def _run_baseline(self, asked: optuna_io.Asked) -> TrialOutcome:
        if study_store.tags(asked.trial).slice != self.slice:
            # A queued baseline of a study `ecntune run` created: this worker's is its own.
            return self._run_trial(asked, "proposal")
        return super()._run_baseline(asked)

    def _budget_spent(self, used: int) -> bool:
        """``budget_step`` over the study; on ``ask`` the ask lock stays held until the trial
        is asked (``_begin``), on ``wait`` the worker polls, beating its lease meanwhile."""
        while True:
            self.guard.check()
            self._log_died()
            self._take_ask()
            with self._lock:  # not between a janitor's fail and its re-queue of a dead trial
                step = budget_step(optuna_io.trials(self.study), self.exp.budget.trials)
            if step == "ask":
                return False
            self._release_ask()
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
                raise ConfigError(f"study {self.study_name}: {ASK_LOCK} held by another worker "
                                  f"for over {wait_s:.0f} s")
            self.guard.check()
            time.sleep(0.02)
        self._ask_lease = lease

    def _release_ask(self) -> None:
        if self._ask_lease is not None:
            lease, self._ask_lease = self._ask_lease, None
            self.leases.release(lease)

    # MLflow ----------------------------------------------------------------------------------
    def _record(self, number: int, state: str, tags: study_store.Tags,
                params: dict[str, Any]) -> TrialRecord:
        rec = super()._record(number, state, tags, params)
        rec.tags["ecntune.slice"] = tags.slice or self.slice
        return rec

    def _backfills(self, t: Any) -> bool:
        """This slice's trials only: two workers back-filling one trial would log it twice
        (the other slices' are their workers' to log; a dead worker's, the janitor's that
        failed it)."""
        tags = study_store.tags(t)
        if tags.verdict == "failed:worker_died":
            return t.number in self.died
        return tags.slice == self.slice

    def _end_tracking(self, interrupted: str | None, failed: bool) -> None:
        self._log_died()
        super()._end_tracking(interrupted, failed)

    def _confirm(self) -> None:
        """Workers only explore; confirmation belongs to one process (``ecntune run``)."""

    def _drift_check(self, after_trial: int) -> None:
        """The study's drift record is one canary's; slices would interleave in it."""

    def _log_report(self) -> None:
        """The study report is written once, not by every worker."""
