"""MLflow tracking (the only module importing mlflow, and only when a tracker is used).

Layout of what lands in MLflow (names are stable; reports and plots build on them):

* experiment ``tracking.experiment`` (default ``ecntune/<experiment name>``), artifacts under
  ``<results_dir>/mlartifacts``; store ``tracking.uri`` (default
  ``sqlite:///<results_dir>/mlflow.db``, always set explicitly, no server needed).
* **parent run** per study, named after the study. Params: ``experiment``, ``study``,
  ``backend``, ``sampler``, ``sampler_seed``, ``mode``, ``trials_budget``, ``fabric.<fact>``,
  ``canary_switches``, ``canary_nics``, ``space.<dim>`` (range text), ``fixed.<knob>``,
  ``objective.<field>``, ``safety.<field>``. Tags: ``ecntune.version``, ``ecntune.study``,
  ``ecntune.role=study``, ``ecntune.storage``, ``ecntune.cluster``. Artifacts:
  ``experiment.yaml`` (secrets redacted), ``search_space.json``, ``fabric.json``; at the end
  ``report/`` (``tuner.report``: HTML, Markdown, ``img/*.png``), ``summary.json`` and metrics
  ``baseline_score``, ``best_score``, ``improvement_percent``, ``trials_ok``,
  ``trials_rolled_back``, ``trials_rejected``.
* **nested run** per trial (tag ``mlflow.parentRunId``), named ``trial-<n>``. Params: every knob
  value by its device name (``kmin_bytes``, ``rpg_ai_rate`` ...) plus ``kmax_ratio`` when
  searched. Metrics (see ``trial_metrics``): ``score``, ``busbw_term``, ``latency_term``,
  ``pfc_term``, ``busbw_norm``, ``pause_us_per_s``, ``busbw_gbytes_per_s.<op>.<size>``,
  ``algbw_gbytes_per_s.<op>.<size>``, ``p50_us``, ``p99_us``, ``p999_us``,
  ``pfc_pause_frames``, ``pfc_pause_duration_us``, ``pfc_pause_transitions``,
  ``switch_pfc_rx_frames``, ``switch_pfc_tx_frames``, ``ecn_marked_pkts``,
  ``np_ecn_marked_roce_packets``, ``cnp_sent``, ``cnp_handled``, ``lossless_drops``,
  ``duration_s``, ``wall_s``, ``restore_s``. Tags: ``ecntune.trial``, ``ecntune.state``
  (COMPLETE/PRUNED/FAIL), ``ecntune.verdict`` (``baseline``, ``ok``, ``rejected:<code>``,
  ``rolled_back:<code>``, ``failed:<reason>``, ``interrupted``), ``ecntune.role=trial``,
  ``ecntune.detail`` (the violation text, when there is one).
  Artifacts: ``trial-<n>.json`` (the raw ``Measurement``) and what
  ``tuner.plots.write_trial_files`` writes: ``settings_diff.json``, ``raw/``,
  ``counters_before.json``/``counters_after.json``/``counters_delta.json``, ``timeseries.png``.

A tracking failure never stops tuning: every call here catches, logs a warning and returns
``None``; the loop back-fills every finished Optuna trial that has no nested run (tag
``ecntune.trial``) from the Optuna storage at the end of the study and on ``ecntune resume``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ecntune.tracking")

_SECRET = re.compile(r"(?im)^(\s*[\w.-]*(password|passphrase|secret|token|api_key|private_key)"
                     r"[\w.-]*\s*:\s*).+$")


def redact(text: str) -> str:
    """Blank out YAML values whose key looks secret (passwords never land in MLflow)."""
    return _SECRET.sub(r"\1'<redacted>'", text)


@dataclass
class TrialRecord:
    """Everything a nested run carries; rebuilt from Optuna user attrs for back-fills."""

    number: int
    state: str
    verdict: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    measurement_path: str | None = None
    detail: str = ""  # what a rejection/rollback was about (safety.limits.Violation text)
    artifact_dir: str | None = None  # more files for the run (``tuner.plots.write_trial_files``)
    tags: dict[str, str] = field(default_factory=dict)  # more tags (``ecntune.slice``)


def trial_metrics(m: Any) -> dict[str, float]:
    """The measurement metrics of one trial (``m`` is an ``objectives.Measurement``)."""
    out: dict[str, float] = {"duration_s": m.duration_s}
    for c in m.collectives:
        key = f"{c.name}.{c.size_bytes}"
        out[f"busbw_gbytes_per_s.{key}"] = c.busbw_gbytes_per_s
        out[f"algbw_gbytes_per_s.{key}"] = c.algbw_gbytes_per_s
    if m.latency is not None:
        out.update(p50_us=m.latency.p50_us, p99_us=m.latency.p99_us, p999_us=m.latency.p999_us)
    d = m.counters
    out.update(
        pfc_pause_frames=d.total("rx_prio3_pause"),
        pfc_pause_duration_us=d.total("rx_prio3_pause_duration"),
        pfc_pause_transitions=d.total("rx_prio3_pause_transition"),
        switch_pfc_rx_frames=d.total("pfc3_rx_pkts"),
        switch_pfc_tx_frames=d.total("pfc3_tx_pkts"),
        ecn_marked_pkts=d.total("queue3_ecn_marked_pkts"),
        np_ecn_marked_roce_packets=d.total("np_ecn_marked_roce_packets"),
        cnp_sent=d.total("np_cnp_sent"),
        cnp_handled=d.total("rp_cnp_handled"),
        lossless_drops=d.total("rx_prio3_discards") + d.total("queue3_drop_pkts"),
    )
    if "wall_s" in m.extra:
        out["wall_s"] = m.extra["wall_s"]
    return {k: float(v) for k, v in out.items()}


def _quiet() -> None:
    for name in ("alembic", "mlflow", "sqlalchemy", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)


class Tracker:
    """One study's MLflow parent run and its nested trial runs (see the module docstring)."""

    def __init__(self, uri: str, experiment: str, artifact_dir: str | Path,
                 enabled: bool = True) -> None:
        self.uri = uri
        self.experiment = experiment
        self.artifact_dir = Path(artifact_dir)
        self.enabled = enabled
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None
        self.failures: list[str] = []
        self._client: Any = None

    def _fail(self, what: str, exc: BaseException) -> None:
        msg = f"MLflow {what} failed ({type(exc).__name__}: {exc}); will back-fill later"
        log.warning(msg)
        self.failures.append(msg)

    def client(self) -> Any:
        if self._client is None:
            _quiet()
            # A remote tracking server that is down must cost seconds, not MLflow's default
            # minutes of retries (the user's own settings win).
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
            if self.uri.startswith("sqlite:///"):
                Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True,
                                                                       exist_ok=True)
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _experiment_id(self) -> str:
        if self.experiment_id is None:
            c = self.client()
            exp = c.get_experiment_by_name(self.experiment)
            if exp is None:
                self.artifact_dir.mkdir(parents=True, exist_ok=True)
                self.experiment_id = c.create_experiment(
                    self.experiment, artifact_location=self.artifact_dir.resolve().as_uri())
            else:
                self.experiment_id = exp.experiment_id
        return self.experiment_id

    def start_study(self, study: str, parent_run_id: str | None, params: dict[str, Any],
                    tags: dict[str, str], texts: dict[str, str]) -> str | None:
        """Create (or re-open, on resume) the parent run; returns its id or None on failure."""
        if not self.enabled:
            return None
        try:
            from mlflow.entities import Param, RunTag

            c = self.client()
            if parent_run_id:
                c.update_run(parent_run_id, status="RUNNING")
                self.parent_run_id = parent_run_id
                return parent_run_id
            run = c.create_run(self._experiment_id(), run_name=study,
                               tags={**tags, "ecntune.role": "study"})
            rid = run.info.run_id
            c.log_batch(rid, params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                        tags=[RunTag(k, v) for k, v in tags.items()])
            for name, text in texts.items():
                c.log_text(rid, text, name)
            self.parent_run_id = rid
            return rid
        except Exception as exc:  # tracking must never break tuning
            self._fail("parent run", exc)
            return None

    def log_trial(self, rec: TrialRecord) -> str | None:
        """One nested run; returns its id or None on failure."""
        if not self.enabled or self.parent_run_id is None:
            return None
        try:
            from mlflow.entities import Metric, Param

            c = self.client()
            tags = {"mlflow.parentRunId": self.parent_run_id, "ecntune.role": "trial",
                    "ecntune.trial": str(rec.number), "ecntune.state": rec.state,
                    "ecntune.verdict": rec.verdict}
            if rec.detail:
                tags["ecntune.detail"] = rec.detail[:5000]
            tags.update(rec.tags)
            run = c.create_run(self._experiment_id(), run_name=f"trial-{rec.number:04d}",
                               tags=tags)
            rid = run.info.run_id
            now = int(time.time() * 1000)
            metrics = [Metric(k, float(v), now, 0) for k, v in rec.metrics.items()
                       if v is not None and v == v and abs(float(v)) != float("inf")]
            c.log_batch(rid, metrics=metrics,
                        params=[Param(k, str(v)) for k, v in sorted(rec.params.items())])
            if rec.measurement_path and Path(rec.measurement_path).exists():
                c.log_artifact(rid, rec.measurement_path)
            if rec.artifact_dir and Path(rec.artifact_dir).is_dir():
                c.log_artifacts(rid, rec.artifact_dir)
            status = "FINISHED" if rec.state in ("COMPLETE", "PRUNED") else "FAILED"
            c.set_terminated(rid, status=status)
            return str(rid)
        except Exception as exc:
            self._fail(f"trial {rec.number}", exc)
            return None

    def log_dir(self, folder: str | Path, artifact_path: str) -> None:
        """Upload a folder into the parent run (the study report and its plots)."""
        if not self.enabled or self.parent_run_id is None:
            return
        try:
            self.client().log_artifacts(self.parent_run_id, str(folder), artifact_path)
        except Exception as exc:
            self._fail(f"artifacts {artifact_path}", exc)

    def end_study(self, metrics: dict[str, float], summary: dict[str, Any],
                  status: str = "FINISHED") -> None:
        if not self.enabled or self.parent_run_id is None:
            return
        try:
            from mlflow.entities import Metric

            c = self.client()
            now = int(time.time() * 1000)
            c.log_batch(self.parent_run_id,
                        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()
                                 if v == v and abs(float(v)) != float("inf")])
            c.log_text(self.parent_run_id, json.dumps(summary, indent=2, default=str),
                       "summary.json")
            c.set_terminated(self.parent_run_id, status=status)
        except Exception as exc:
            self._fail("study summary", exc)

    def nested_runs(self) -> list[Any]:
        """The parent run's trial runs (for ``show`` and tests)."""
        c = self.client()
        return list(c.search_runs(
            [self._experiment_id()],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
            max_results=10_000))
