"""The study's own records in Optuna attributes: the one module that names, reads and writes them.

Optuna keeps each trial's params, objective values, state and constraints. What ecntune adds
rides in user attributes, and only this module knows their names and types:

* a trial's ``Tags``: its role (baseline, warm start, proposal), verdict, knob values,
  metrics, paired score, where its measurements are, its slice and its owner process;
* the study's ``Info``: the experiment as run, budget and mode, the MLflow parent run, the
  re-tune lineage, the baseline's repeats and noise, drift checks, the confirmation and its
  placements, the canary and the kept trial;
* per slice of a shared study: the baseline's paired replicates (``baseline``), the canary's
  settings before the first change (``snapshot``, which ``recover`` checks a journal against)
  and the twin trials each worker ran (``twin_trials``).

Readers get typed values; writers check the names, so a typo is an error here rather than an
attribute nobody reads. ``tests/test_project.py`` holds every other module to this: none
touches ``user_attrs`` or ``system_attrs`` but this one and ``tuner.optuna_io``, which only
carries the dicts built here to Optuna.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

from objectives.measurement import Measurement
from tuner.settings import Settings

TWIN_TRIALS = "twin_trials"  # + ":<slice>:<worker>": each scale-out worker's own count


@dataclass(frozen=True)
class Tags:
    """What ecntune wrote on one trial."""

    role: str = "proposal"  # "baseline", "warm:<label>", "proposal"
    verdict: str = "?"  # ok, baseline, rejected:<code>, rolled_back:<code>, failed:<why>, ...
    values: dict[str, int] = field(default_factory=dict)  # every knob, searched or not
    metrics: dict[str, float] = field(default_factory=dict)
    score: float | None = None  # the paired scalar score (None: not measured)
    per_replicate: list[float] = field(default_factory=list)
    replicates: int = 0
    detail: str = ""  # why a trial was refused, rolled back or failed
    measurement_path: str | None = None
    artifact_dir: str | None = None
    slice: str | None = None  # a shared study's slice that ran it
    owner: dict[str, Any] | None = None  # the process that runs it (optuna_io.process_owner)
    violation: float | None = None  # twin exploration's inner study: guardrail violation


_TRIAL_KEYS = {f.name for f in fields(Tags)}


def tags(t: Any) -> Tags:
    """A trial's tags (a ``FrozenTrial`` or a live ``Trial``)."""
    ua = t.user_attrs
    return Tags(role=str(ua.get("role", "proposal")), verdict=str(ua.get("verdict", "?")),
                values=dict(ua.get("values", {})), metrics=dict(ua.get("metrics", {})),
                score=ua.get("score"), per_replicate=list(ua.get("per_replicate", [])),
                replicates=int(ua.get("replicates", 0)), detail=str(ua.get("detail", "")),
                measurement_path=ua.get("measurement_path"),
                artifact_dir=ua.get("artifact_dir"), slice=ua.get("slice"),
                owner=ua.get("owner"), violation=ua.get("violation"))


def trial_attrs(**values: Any) -> dict[str, Any]:
    """Checked tags for a trial Optuna is about to create or finish (``optuna_io``)."""
    unknown = set(values) - _TRIAL_KEYS
    if unknown:
        raise KeyError(f"not a trial tag: {', '.join(sorted(unknown))}")
    return values


def tag(trial: Any, **values: Any) -> None:
    """Write tags on a live trial."""
    for k, v in trial_attrs(**values).items():
        trial.set_user_attr(k, v)


def mark_verdict(storage: Any, trial_id: int, verdict: str) -> None:
    """The verdict of another process's trial (Optuna has no public setter for it; the storage
    has), written while it is still open."""
    storage.set_trial_user_attr(trial_id, "verdict", trial_attrs(verdict=verdict)["verdict"])


def only_role(t: Any) -> Any:
    """A copy of a trial keeping only its role: what a retry copies of a dead worker's trial
    (its params and role, not the dead run's results)."""
    import copy

    t = copy.deepcopy(t)
    t.user_attrs = {k: v for k, v in t.user_attrs.items() if k == "role"}
    return t


def enqueued(t: Any) -> bool:
    """Was the trial queued with fixed params (baseline, warm start, a retry) rather than
    proposed by the sampler?"""
    return "fixed_params" in t.system_attrs


def retries(t: Any) -> set[int]:
    """The trial numbers this one re-runs (Optuna's RetryFailedTrialCallback's records)."""
    out = set(t.system_attrs.get("retry_history", []))
    if "failed_trial" in t.system_attrs:
        out.add(t.system_attrs["failed_trial"])
    return out


def is_retry(t: Any) -> bool:
    return "failed_trial" in t.system_attrs


@dataclass(frozen=True)
class Info:
    """What ecntune wrote on the study (defaults: a study from before the attribute)."""

    experiment_yaml: str | None = None  # the file as run, for resume and re-tune
    experiment_name: str | None = None
    mode: str = "scalar"
    created_at: float = 0.0
    ecntune_version: str | None = None
    startup_trials: int = 0
    trials_budget: int | None = None  # the effective budget, --trials included
    shared: bool = False
    lineage: dict[str, Any] = field(default_factory=dict)  # a re-tune's old study
    mlflow_parent_run_id: str | None = None
    mlflow_tracking_uri: str | None = None
    repeats: int = 1
    noise: dict[str, float] = field(default_factory=dict)
    drift: list[dict[str, Any]] = field(default_factory=list)
    confirmation: dict[str, Any] | None = None  # study.Confirmation.stored()
    confirmation_seeds: list[int] = field(default_factory=list)
    canary: dict[str, Any] = field(default_factory=dict)
    kept_trial: int | None = None
    findings: list[dict[str, Any]] | None = None  # run's fabric diagnosis (None: not run)
    findings_accepted: bool = False  # run went ahead with --accept-findings
    twin_calibration: dict[str, Any] | None = None  # ``ecntune calibrate``'s, as the twin used


_STUDY_KEYS = {f.name for f in fields(Info)}


def info(study: Any) -> Info:
    """The study's attributes (a ``Study`` or a ``StudySummary``)."""
    ua = study.user_attrs
    return Info(**{k: v for k, v in ua.items() if k in _STUDY_KEYS and v is not None})


def record(study: Any, **values: Any) -> None:
    """Write study attributes, by their ``Info`` names."""
    unknown = set(values) - _STUDY_KEYS
    if unknown:
        raise KeyError(f"not a study attribute: {', '.join(sorted(unknown))}")
    for k, v in values.items():
        study.set_user_attr(k, v)


def created(study: Any, **values: Any) -> None:
    """A new study's attributes, stamped with its creation time."""
    record(study, created_at=time.time(), **values)


def append_drift(study: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    drift = [*info(study).drift, row]
    record(study, drift=drift)
    return drift


def _slice_key(name: str, slice_name: str | None) -> str:
    return f"{name}:{slice_name}" if slice_name else name


def baseline(study: Any, slice_name: str | None = None) -> tuple[list[Measurement], int | None]:
    """The baseline's stored replicates and the study's paired repeats (a shared study keeps
    them per slice); ``([], None)`` before the baseline ran."""
    ua = study.user_attrs
    ms = [Measurement.model_validate_json(x)
          for x in ua.get(_slice_key("baseline_measurements", slice_name), [])]
    reps = ua.get(_slice_key("repeats", slice_name))
    return ms, int(reps) if reps is not None else None


def save_baseline(study: Any, ms: list[Measurement], repeats: int,
                  slice_name: str | None = None, **more: Any) -> None:
    """The baseline's replicates (already stripped of raw samples) and the paired repeats;
    ``more``: other ``Info`` attributes written with them (``noise``)."""
    study.set_user_attr(_slice_key("baseline_measurements", slice_name),
                        [m.model_dump_json() for m in ms])
    study.set_user_attr(_slice_key("repeats", slice_name), repeats)
    if more:
        record(study, **more)


def record_snapshot(study: Any, settings: Settings, slice_name: str | None = None) -> None:
    """The canary's settings as this process found them before its first change: every
    journal record it writes carries this baseline, and ``recover`` applies a journal's
    baseline only when the study recorded the same (a CRC is not a signature)."""
    study.set_user_attr(_slice_key("baseline_snapshot", slice_name), settings.model_dump())


def snapshot(study: Any, slice_name: str | None = None) -> Settings | None:
    """The snapshot ``record_snapshot`` stored, or None (a study that never ran a trial)."""
    raw = study.user_attrs.get(_slice_key("baseline_snapshot", slice_name))
    return None if raw is None else Settings.model_validate(raw)


def count_twin_trials(study: Any, key: str, n: int) -> None:
    """``key``: ``TWIN_TRIALS``, or a worker's own ``TWIN_TRIALS:<slice>:<worker>``."""
    if key != TWIN_TRIALS and not key.startswith(TWIN_TRIALS + ":"):
        raise KeyError(f"not a twin-trial counter: {key}")
    study.set_user_attr(key, n)


def twin_trials(study: Any) -> int | None:
    """Twin trials of the study (``sampler: twin``), every worker's summed; None without."""
    counts = [int(v) for k, v in study.user_attrs.items()
              if k == TWIN_TRIALS or k.startswith(TWIN_TRIALS + ":")]
    return sum(counts) if counts else None
