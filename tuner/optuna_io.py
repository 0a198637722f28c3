"""Everything that touches Optuna (the only module importing it, with ``tuner.samplers``, the
benchmark's alternative samplers).

The study lives in an Optuna storage (SQLite file next to the results by default). What the loop
needs beyond Optuna's own records rides in attributes, which ``tuner.study_store`` alone names,
reads and writes; this module only carries the dicts it builds to Optuna.

Optuna 5 notes: ``create_study``/``load_study`` take keyword arguments only; the PFC budget
is ``trial.set_constraint("pfc_budget", v)`` (feasible when <= 0); an ask/tell loop gets no
heartbeat janitor, so ``fail_stale`` closes trials a killed process left RUNNING.

Shared studies (``storage: postgresql://...``, several workers): ``open_storage`` gives the
storage Optuna's heartbeat (``heartbeat_s``) and ``RetryHeartbeatStaleTrialCallback``; a worker
records its trial's heartbeat (``record_heartbeat``) and, before each ask, ``fail_dead``
fails the trials whose heartbeat stopped and re-queues them with the same params. ``fail_stale``
(everything RUNNING) is only right when no other worker can be running.
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner import storage_url, study_store
from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.experiment import SamplerSpec
    from tuner.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
logging.getLogger("optuna").propagate = False

COMPLETE, PRUNED, FAIL, RUNNING = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                                   TrialState.RUNNING)


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for d in space.dims:
        if d.integer:
            out[d.name] = IntDistribution(int(d.low), int(d.high), log=d.log)
        else:
            out[d.name] = FloatDistribution(d.low, d.high, log=d.log)
    return out


def make_sampler(spec: SamplerSpec, multi: bool, *,
                 pfc_alarm_us_per_s: float = 1000.0) -> optuna.samplers.BaseSampler:
    """The sampler, checked now rather than at trial 10 (GP needs torch, CMA-ES cmaes).
    ``pfc_alarm_us_per_s``: the pause level the ``ecn-shifter`` treats as a PFC alarm."""
    if spec.name == "twin":
        from tuner.twin_search import TwinSampler

        return TwinSampler(seed=spec.seed, twin_trials=spec.twin_trials)
    if spec.name == "tpe":
        return optuna.samplers.TPESampler(seed=spec.seed, n_startup_trials=spec.startup_trials,
                                          multivariate=True, constant_liar=True)
    if spec.name == "local-tpe":
        from tuner.samplers import LocalStartTPESampler

        return LocalStartTPESampler(seed=spec.seed, startup=spec.startup_trials)
    if spec.name == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    if spec.name == "hillclimb":
        from tuner.samplers import HillClimbSampler

        return HillClimbSampler(seed=spec.seed)
    if spec.name == "ecn-shifter":
        from tuner.samplers import EcnShifterSampler

        return EcnShifterSampler(seed=spec.seed, pfc_alarm_us_per_s=pfc_alarm_us_per_s)
    if spec.name == "qmc":
        return optuna.samplers.QMCSampler(seed=spec.seed, warn_independent_sampling=False)
    if spec.name == "cmaes":
        if multi:
            raise ConfigError("sampler.name: value 'cmaes' -- CMA-ES is single-objective; "
                              "use tpe for objective.mode: multi")
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise ConfigError("sampler.name: value 'cmaes' -- needs the cmaes package "
                              "(pip install cmaes)") from None
        return optuna.samplers.CmaEsSampler(seed=spec.seed, n_startup_trials=spec.startup_trials)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError("sampler.name: value 'gp' -- GPSampler needs torch (pip install "
                          "torch); use tpe otherwise") from None
    return optuna.samplers.GPSampler(seed=spec.seed, n_startup_trials=spec.startup_trials)


class PairedMedianPruner(optuna.pruners.BasePruner):
    """Stop a trial whose running paired score is clearly below the median of the other trials
    at the same replicate (the same placement: common random numbers make the comparison fair)
    that met every guardrail there: a setting that breaks one scores what no candidate may, and
    measured against those, a feasible trade (less busbw, no PFC) would be stopped for it.

    "Clearly" is ``margin`` log2 units below; until ``n_startup_trials`` such trials have
    finished, nothing is pruned.
    """

    def __init__(self, margin: float, n_startup_trials: int) -> None:
        self.margin = margin
        self.n_startup_trials = n_startup_trials

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        others = [t.intermediate_values[step]
                  for t in study.get_trials(deepcopy=False, states=(COMPLETE, PRUNED))
                  if step in t.intermediate_values
                  and all(v <= 0 for v in constraints(t).values())]
        if len(others) < max(self.n_startup_trials, 1):
            return False
        others.sort()
        mid = len(others) // 2
        median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
        return trial.intermediate_values[step] < median - self.margin


def report(asked: Asked, value: float, step: int) -> bool:
    """Report a running value at ``step``; True when the pruner says stop."""
    asked.trial.report(value, step)
    return bool(asked.trial.should_prune())


_STORAGES: dict[tuple[str, int | None], optuna.storages.RDBStorage] = {}


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.RDBStorage:
    """The Optuna storage at ``url`` (one per URL and heartbeat per process).

    Credentials never come from the URL (``tuner.storage_url``): libpq reads ``PGPASSWORD``
    or ``~/.pgpass``. With ``heartbeat_s`` a trial whose heartbeat is older than two beats is
    stale; ``fail_dead`` fails it and Optuna's retry callback re-queues its params.
    """
    key = (url, heartbeat_s)
    if key in _STORAGES:
        return _STORAGES[key]
    try:
        storage_url.check_storage(url)
    except ValueError as exc:
        raise ConfigError(f"storage {storage_url.hide(url)}: {exc}") from None
    ensure_storage_dir(url)
    import sqlalchemy.exc

    kwargs: dict[str, Any] = {}
    if storage_url.is_postgres(url):  # a server restart must not poison the pool
        kwargs["engine_kwargs"] = {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():  # heartbeat and the retry callback are "experimental"
            warnings.simplefilter("ignore")
            if heartbeat_s is not None:
                kwargs.update(heartbeat_interval=heartbeat_s, grace_period=2 * heartbeat_s,
                              heartbeat_stale_trial_callback=(
                                  optuna.storages.RetryHeartbeatStaleTrialCallback()))
            st = optuna.storages.RDBStorage(url, **kwargs)
    # DatabaseError: OperationalError (unreachable, refused) and a file that is not, or no
    # longer, a database (truncated, overwritten)
    except (sqlalchemy.exc.DatabaseError, sqlalchemy.exc.ArgumentError) as exc:
        why = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ConfigError(f"storage {storage_url.hide(url)}: cannot open it: {why}") from None
    _STORAGES[key] = st
    return st


def record_heartbeat(study: optuna.Study, number: int) -> None:
    """Tell the storage the worker running trial ``number`` is alive."""
    st: Any = study._storage  # RDBStorage behind Optuna's cache: a BaseHeartbeat
    st.record_heartbeat(st.get_trial_id_from_study_id_trial_number(study._study_id, number))


def fail_dead(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose heartbeat stopped (their worker died), with the verdict
    ``failed:worker_died``, and re-queue each with the same params (Optuna's
    ``RetryHeartbeatStaleTrialCallback``; the copy's system attr ``failed_trial`` names the
    original). Several workers may run this at once: each trial is failed by one of them.
    Returns the numbers this call failed."""
    st: Any = study._storage
    callback = st.get_heartbeat_stale_trial_callback()
    if st.get_heartbeat_interval() is None:
        return []
    failed = []
    # Optuna's own fail_stale_trials, plus the verdict written while the trial is still open.
    for trial_id in st._backend._get_stale_trial_ids(study._study_id):
        try:
            study_store.mark_verdict(st, trial_id, "failed:worker_died")
            if st.set_trial_state_values(trial_id, state=FAIL):
                failed.append(trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker's janitor (or the worker itself) closed it first
    out = []
    for trial_id in failed:
        t = st.get_trial(trial_id)
        if callback is not None:
            callback(study, study_store.only_role(t))
        out.append(t.number)
    return out


def ensure_storage_dir(url: str) -> None:
    """Create the folder of a ``sqlite:///path`` storage so Optuna can create the file."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def create_study(name: str, storage: str, directions: list[str],
                 sampler: optuna.samplers.BaseSampler,
                 pruner: optuna.pruners.BasePruner | None = None, *,
                 heartbeat_s: int | None = None) -> optuna.Study:
    ensure_storage_dir(storage)
    try:
        dirs = [optuna.study.StudyDirection.MAXIMIZE if d == "maximize"
                else optuna.study.StudyDirection.MINIMIZE for d in directions]
        return optuna.create_study(study_name=name,
                                   storage=open_storage(storage, heartbeat_s=heartbeat_s),
                                   directions=dirs, sampler=sampler, pruner=pruner,
                                   load_if_exists=False)
    except optuna.exceptions.DuplicatedStudyError:
        raise ConfigError(f"study {name!r} already exists in {storage}; continue it with "
                          f"`ecntune resume {name}` or pick another --study name") from None


def load_study(name: str, storage: str,
               sampler: optuna.samplers.BaseSampler | None = None,
               pruner: optuna.pruners.BasePruner | None = None, *,
               heartbeat_s: int | None = None) -> optuna.Study:
    try:
        return optuna.load_study(study_name=name,
                                 storage=open_storage(storage, heartbeat_s=heartbeat_s),
                                 sampler=sampler, pruner=pruner)
    except KeyError:
        known = study_names(storage)
        raise ConfigError(f"no study {name!r} in {storage}; it has: "
                          f"{', '.join(known) or 'none'}") from None


def study_names(storage: str) -> list[str]:
    """Study names in creation order (oldest first)."""
    ensure_storage_dir(storage)
    summaries = optuna.study.get_all_study_summaries(storage=open_storage(storage),
                                                     include_best_trial=False)
    return [s.study_name for s in sorted(summaries,
                                         key=lambda s: study_store.info(s).created_at)]


def process_owner(pid: int | None = None) -> dict[str, Any]:
    """Who runs a trial: host, boot, pid and the process's start time, so that "dead" is proved
    (the pid gone, or reused by a later process) rather than assumed."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": _boot_id(), "ns": pid_namespace(),
            "pid": pid, "start": _start_ticks(pid)}


def owner_gone(owner: Any) -> bool:
    """True only when ``owner`` (``process_owner``) provably no longer runs: same host, boot and
    PID namespace, and its pid is gone or belongs to a process started since. Another machine,
    boot or PID namespace (a container: its pids are not ours to look up) cannot be told apart
    from a live owner here: False."""
    if not isinstance(owner, dict):
        return True  # a trial of a version that did not record its owner: the old rule
    if owner.get("host") != socket.gethostname() or owner.get("boot") != _boot_id():
        return False
    if owner.get("ns", pid_namespace()) != pid_namespace():  # absent: recorded before owners
        return False                                          # carried it (same boot, as then)
    start = _start_ticks(int(owner.get("pid", -1)))
    return start is None or start != owner.get("start")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's PID namespace (``/proc/self/ns/pid``, e.g. ``pid:[4026531836]``), "" if
    it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """The process's start time since boot (/proc/<pid>/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def fail_stale(study: optuna.Study) -> tuple[list[int], list[int]]:
    """Close the trials a killed process left RUNNING (no heartbeat janitor in ask/tell): those
    whose owner is provably gone (``owner_gone``). Returns (closed, left alone: a live owner,
    or one on another machine, for example another run on a shared PostgreSQL study)."""
    closed, alive = [], []
    for t in study.get_trials(deepcopy=False, states=(RUNNING,)):
        if not owner_gone(study_store.tags(t).owner):
            alive.append(t.number)
            continue
        # Optuna has no public setter for another process's trial attrs; the storage has.
        study_store.mark_verdict(study._storage, t._trial_id, "interrupted")
        study.tell(t.number, state=FAIL, skip_if_finished=True)
        closed.append(t.number)
    return closed, alive


@dataclass
class Asked:
    """One asked trial: its number and the searched params."""

    trial: Any  # optuna.Trial
    number: int
    params: dict[str, Any]


def enqueue(study: optuna.Study, params: dict[str, Any], role: str) -> None:
    with warnings.catch_warnings():  # warm starts may sit outside the searched ranges
        warnings.simplefilter("ignore")
        study.enqueue_trial(params, user_attrs=study_store.trial_attrs(role=role))


def ask(study: optuna.Study, dists: dict[str, BaseDistribution]) -> Asked:
    with warnings.catch_warnings():  # enqueued baseline values may sit outside the ranges
        warnings.simplefilter("ignore")
        trial = study.ask(fixed_distributions=dists)
    study_store.tag(trial, owner=process_owner())
    return Asked(trial=trial, number=trial.number, params=dict(trial.params))


def ask_fixed(study: optuna.Study, params: dict[str, Any],
              dists: dict[str, BaseDistribution], tags: dict[str, Any]) -> Asked:
    """A new RUNNING trial with these params, created directly rather than queued, so no other
    worker of a shared study can pick it up (a slice's own baseline)."""
    from optuna.trial import Trial, create_trial

    def covering(d: BaseDistribution, v: Any) -> BaseDistribution:
        # A baseline value may sit outside the searched range: widen this trial's copy.
        if isinstance(d, FloatDistribution | IntDistribution) and not d._contains(
                d.to_internal_repr(v)):
            return type(d)(min(d.low, v), max(d.high, v), log=d.log)
        return d

    # An integer knob's param can come back fractional from the Kmax ceiling's inverse map
    # (``SearchSpace.params_of``); create_trial validates it, unlike enqueue (``ask``). The
    # baseline is measured on the snapshot's values, not on its params, and ``values`` rounds
    # every integer knob, so the nearest integer labels the same point.
    params = {k: (round(v) if isinstance(dists.get(k), IntDistribution) else v)
              for k, v in params.items()}
    template = create_trial(state=RUNNING, params=params,
                            distributions={k: covering(dists[k], v) for k, v in params.items()},
                            user_attrs=study_store.trial_attrs(**tags))
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    trial = Trial(study, trial_id)
    return Asked(trial=trial, number=trial.number, params=dict(trial.params))


def tell(study: optuna.Study, asked: Asked, *, state: TrialState,
         values: tuple[float, ...] | None = None,
         constraints: dict[str, float] | None = None,
         attrs: dict[str, Any] | None = None) -> None:
    """Finish a trial. ``constraints`` (feasible when <= 0) are set in every state: Optuna's
    TPE ranks a trial with a positive constraint below every feasible one, so rolled-back and
    rejected proposals teach the sampler where not to go."""
    study_store.tag(asked.trial, **(attrs or {}))
    for k, v in (constraints or {}).items():
        asked.trial.set_constraint(k, float(v))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.tell(asked.trial, list(values) if values is not None else None, state=state,
                   skip_if_finished=True)


def constraints(t: FrozenTrial) -> dict[str, float]:
    return dict(t.constraints)


def trials(study: optuna.Study) -> list[FrozenTrial]:
    return list(study.get_trials(deepcopy=False))


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Best trial (scalar) or the Pareto front (multi), feasible ones only when constrained."""
    done = [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))]
    if not done:
        return []
    return list(study.best_trials) if len(study.directions) > 1 else [study.best_trial]


def directions(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def plot(study: optuna.Study, kind: str, **kwargs: Any) -> Any:
    """An ``optuna.visualization.matplotlib`` plot (``kind``: ``param_importances``,
    ``parallel_coordinate``, ``slice`` ...) as its matplotlib Axes (for ``tuner.plots``)."""
    from optuna.visualization import matplotlib as vis

    with warnings.catch_warnings():  # the matplotlib backend is marked experimental
        warnings.simplefilter("ignore")
        return getattr(vis, f"plot_{kind}")(study, **kwargs)
