"""MLflow tracking (the only module importing mlflow, and only when a tracker is used).

Layout of what lands in MLflow (names are stable; reports and plots build on them):

* experiment ``tracking.experiment`` (default ``ecntune/<experiment name>``), artifacts under
  ``<results_dir>/mlartifacts``; store ``tracking.uri`` (default
  ``sqlite:///<results_dir>/mlflow.db``, always set explicitly, no server needed).
* **parent run** per study, named after the study. Params: ``experiment``, ``study``,
  ``backend``, ``sampler``, ``sampler_seed``, ``mode``, ``trials_budget``, ``fabric.<fact>``,
  ``canary_switches``, ``canary_nics``, ``space.<dim>`` (range text), ``fixed.<knob>``,
  ``objective.<field>``, ``safety.<field>``, ``twin.calibrated.<field>`` (the twin's values from
  ``ecntune calibrate``, when it used them). Tags: ``ecntune.version``, ``ecntune.study``,
  ``ecntune.role=study``, ``ecntune.storage``, ``ecntune.cluster``, ``ecntune.i_know`` (the
  safety limits run past their bounds with ``ecntune --i-know``, set on every resume). Artifacts:
  ``experiment.yaml`` (secrets redacted), ``search_space.json``, ``fabric.json``; at the end
  ``report/`` (``tuner.report``: HTML, Markdown, ``img/*.png``), ``summary.json`` and metrics
  ``best_score``, ``best_trial``, ``trials_<kind>`` per verdict kind (ok, rolled_back,
  rejected, screened, infeasible, pruned, failed), ``rolled_back_share``,
  ``canary_time_saved_s`` and the confirmation's ``confirmed``, ``confirmed_change_percent``
  and ``confirmed_ci95_low``/``high`` (the primary metric), and the winner's per-metric
  effects ``confirmed_<metric>_change_percent`` / ``_ci95_low`` / ``_ci95_high`` for busbw,
  p99_us, pause_us_per_s and tenant_goodput.
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
``None``. The first failure opens a *circuit breaker*: nothing more is sent for the rest of the
study (a dead server would cost its retries on every trial); the loop back-fills every finished
Optuna trial that has no nested run (tag ``ecntune.trial``) from the Optuna storage at the end
of the study and on ``ecntune resume``, and that back-fill (``nested_runs``) is the probe that
closes the breaker again once the store answers.

Secrets never reach MLflow, Optuna or the console: ``redact`` walks the parsed experiment YAML
(any key that names a secret, and the password in every URL), ``scrub`` takes URL credentials
out of any text at the MLflow sinks (params, tags, texts, details), and
``move_url_credentials`` takes the credentials out of ``storage`` and ``tracking.uri`` before a
run starts (into the environment variables the drivers read), so no stored or printed URL holds
them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import yaml

log = logging.getLogger("ecntune.tracking")

REDACTED = "<redacted>"
SECRET_KEY = re.compile(r"passw(or)?d|passphrase|secret|token|api[_-]?key|private[_-]?key|"
                        r"credential", re.IGNORECASE)
# A URL: scheme (a letter, then letters, digits, + . -), ://, then anything but space/quotes.
_LETTERS = frozenset(string.ascii_letters)
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+.-")
_SEP = re.compile("://")
_REST = re.compile(r"[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``url`` without its password (the user stays) and with secret query values blanked."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return REDACTED
    netloc, query = parts.netloc, parts.query
    if password is not None:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.split(':', 1)[0]}:{REDACTED}@{host}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(SECRET_KEY.search(k) for k, _ in pairs):
        query = "&".join(f"{k}={REDACTED if SECRET_KEY.search(k) else v}" for k, v in pairs)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return _join(parts.scheme, netloc, parts.path, query, parts.fragment)


def _join(scheme: str, netloc: str, path: str, query: str, fragment: str) -> str:
    """``urlunsplit`` that keeps ``scheme://`` with an empty host (``sqlite:////abs``)."""
    return (f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")
            + (f"#{fragment}" if fragment else ""))


def scrub(text: str) -> str:
    """Every URL in ``text`` through ``redact_url`` (for free text bound for a store).

    Linear in ``len(text)``: it looks for ``://`` and walks back over the scheme, where the
    regex ``scheme://rest`` tried every start of a long run of letters (40 KB took 4 s)."""
    out: list[str] = []
    last = 0
    for m in _SEP.finditer(text):
        sep = m.start()
        if sep < last:
            continue  # inside the URL just redacted
        start = sep
        while start > last and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < sep and text[start] not in _LETTERS:
            start += 1  # a scheme begins with a letter
        rest = _REST.match(text, m.end())
        if start == sep or rest is None:
            continue
        out += [text[last:start], redact_url(text[start:rest.end()])]
        last = rest.end()
    return "".join([*out, text[last:]])


def _walk(node: Any) -> tuple[Any, bool]:
    if isinstance(node, dict):
        out, changed = {}, False
        for k, v in node.items():
            if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "", REDACTED):
                out[k], hit = REDACTED, True
            else:
                out[k], hit = _walk(v)
            changed |= hit
        return out, changed
    if isinstance(node, list):
        items = [_walk(v) for v in node]
        return [v for v, _ in items], any(h for _, h in items)
    if isinstance(node, str):
        clean = scrub(node)
        return clean, clean != node
    return node, False


def redact(text: str) -> str:
    """Experiment/inventory YAML with every secret blanked: values of keys that name a secret
    (at any depth, in lists, flow mappings, quoted keys, block scalars) and URL passwords.

    The text is parsed, not pattern-matched; unchanged when there is nothing to blank (its
    comments and layout stay), otherwise re-written from the parsed data. Text that does not
    parse is never passed on."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "# not stored: the experiment text is not valid YAML\n"
    clean, changed = _walk(data)
    if not changed:
        return text
    return "# secrets redacted by ecntune\n" + yaml.safe_dump(clean, sort_keys=False,
                                                              allow_unicode=True)


# Where a driver reads a password from when it is not in the URL.
_PASSWORD_ENV = {"postgresql": "PGPASSWORD", "postgres": "PGPASSWORD",
                 "http": "MLFLOW_TRACKING_PASSWORD", "https": "MLFLOW_TRACKING_PASSWORD"}
_USER_ENV = {"http": "MLFLOW_TRACKING_USERNAME", "https": "MLFLOW_TRACKING_USERNAME"}


def move_url_credentials(urls: dict[str, str | None]) -> tuple[dict[str, str | None],
                                                                dict[str, str]]:
    """``({field: url without its password}, {ENV_VAR: password})``.

    The password moves to the variable its driver reads (libpq ``PGPASSWORD``, MLflow's
    ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``); SQLite has no passwords, so one there is
    dropped. Raises ``ConfigError`` naming the field when that is impossible (another scheme,
    or two different passwords for one variable)."""
    from tuner.errors import ConfigError

    out: dict[str, str | None] = {}
    env: dict[str, str] = {}
    for field_name, url in urls.items():
        if not url:
            out[field_name] = url
            continue
        parts = urlsplit(url)
        if parts.password is None:
            out[field_name] = url
            continue
        scheme = parts.scheme.split("+", 1)[0].lower()
        host = parts.netloc.rpartition("@")[2]
        user = unquote(parts.username or "")
        if scheme == "sqlite" or unquote(parts.password) == REDACTED:
            # no passwords in SQLite; a redacted one (a stored experiment) comes from the
            # environment or the driver's password file
            keep = f"{parts.username}@{host}" if parts.username and scheme != "sqlite" else host
            out[field_name] = _join(parts.scheme, keep, parts.path, parts.query,
                                    parts.fragment)
            continue
        var = _PASSWORD_ENV.get(scheme)
        if var is None:
            raise ConfigError(f"{field_name}: a password in a {scheme} URL would be stored "
                              "with the study -- put it in the driver's own configuration "
                              "file and remove it from the URL")
        wanted = {var: unquote(parts.password)}
        if scheme in _USER_ENV:
            wanted[_USER_ENV[scheme]] = user
            netloc = host
        else:
            netloc = f"{parts.username}@{host}" if parts.username else host
        for k, v in wanted.items():
            if env.get(k, v) != v:
                raise ConfigError(f"{field_name}: a second, different password for {k} -- "
                                  "use the driver's own password file (e.g. ~/.pgpass)")
            env[k] = v
        out[field_name] = _join(parts.scheme, netloc, parts.path, parts.query, parts.fragment)
    return out, env


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
    origin: str = ""  # "baseline", "warm:<label>" (a known-good start) or "proposal"
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
    for key in ("wall_s", "probe_overlap"):  # probe_overlap: SSH, share of probe under load
        if key in m.extra:
            out[key] = m.extra[key]
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
        self.broken = False  # the circuit breaker: open after the first failure
        self._client: Any = None

    def _fail(self, what: str, exc: BaseException) -> None:
        msg = scrub(f"MLflow {what} failed ({type(exc).__name__}: {exc}); "
                    + ("will back-fill later" if not self.broken else "still down"))
        if not self.broken:
            msg += "; no more MLflow calls until the end of the study"
        self.broken = True
        log.warning(msg)
        self.failures.append(msg)

    def _off(self) -> bool:
        return not self.enabled or self.broken

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
        if self._off():
            return None
        try:
            from mlflow.entities import Param, RunTag

            c = self.client()
            if parent_run_id:
                c.update_run(parent_run_id, status="RUNNING")
                self.parent_run_id = parent_run_id
                return parent_run_id
            run = c.create_run(self._experiment_id(), run_name=study,
                               tags={**{k: scrub(str(v)) for k, v in tags.items()},
                                     "ecntune.role": "study"})
            rid = run.info.run_id
            c.log_batch(rid, params=[Param(k, scrub(str(v))[:6000]) for k, v in params.items()],
                        tags=[RunTag(k, scrub(str(v))) for k, v in tags.items()])
            for name, text in texts.items():
                c.log_text(rid, scrub(text), name)
            self.parent_run_id = rid
            return rid
        except Exception as exc:  # tracking must never break tuning
            self._fail("parent run", exc)
            return None

    def log_trial(self, rec: TrialRecord, into: str | None = None) -> str | None:
        """One nested run; returns its id or None on failure (or while the breaker is open).

        ``into``: a run of this trial whose writer was killed mid-log (the back-fill's orphan),
        completed in place so that a trial never has two runs; the params it already holds
        are left as they are (MLflow params are write-once)."""
        if self._off() or self.parent_run_id is None:
            return None
        try:
            from mlflow.entities import Metric, Param, RunTag

            c = self.client()
            from tuner.optuna_io import process_owner

            # ecntune.writer: this process, so that a run it leaves RUNNING (killed between
            # create_run and set_terminated) is closed as soon as it is proved gone.
            tags = {"mlflow.parentRunId": self.parent_run_id, "ecntune.role": "trial",
                    "ecntune.trial": str(rec.number), "ecntune.state": rec.state,
                    "ecntune.verdict": rec.verdict, "ecntune.writer": json.dumps(process_owner())}
            if rec.detail:
                tags["ecntune.detail"] = scrub(rec.detail)[:5000]
            if rec.origin:
                tags["ecntune.origin"] = rec.origin
            tags.update(rec.tags)
            held: dict[str, str] = {}
            if into is None:
                rid = c.create_run(self._experiment_id(), run_name=f"trial-{rec.number:04d}",
                                   tags=tags).info.run_id
            else:
                rid, held = into, c.get_run(into).data.params
                tags["ecntune.completed_by_backfill"] = "true"
                c.log_batch(rid, tags=[RunTag(k, v) for k, v in tags.items()])
            now = int(time.time() * 1000)
            metrics = [Metric(k, float(v), now, 0) for k, v in rec.metrics.items()
                       if v is not None and v == v and abs(float(v)) != float("inf")]
            c.log_batch(rid, metrics=metrics,
                        params=[Param(k, str(v)) for k, v in sorted(rec.params.items())
                                if k not in held])
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

    def tag_study(self, key: str, value: str) -> None:
        """A tag on the parent run, set again on every resume (what this session ran with)."""
        if self._off() or self.parent_run_id is None:
            return
        try:
            self.client().set_tag(self.parent_run_id, key, scrub(value))
        except Exception as exc:
            self._fail(f"tag {key}", exc)

    def log_dir(self, folder: str | Path, artifact_path: str) -> None:
        """Upload a folder into the parent run (the study report and its plots)."""
        if self._off() or self.parent_run_id is None:
            return
        try:
            self.client().log_artifacts(self.parent_run_id, str(folder), artifact_path)
        except Exception as exc:
            self._fail(f"artifacts {artifact_path}", exc)

    def log_run(self, name: str, role: str, tags: dict[str, str], metrics: dict[str, float],
                files: list[Path]) -> str | None:
        """One stand-alone run (not a study, e.g. a ``diagnose``) with its files as artifacts;
        returns its id, or None when tracking is off or fails (never raises)."""
        if self._off():
            return None
        try:
            from mlflow.entities import Metric

            c = self.client()
            run = c.create_run(self._experiment_id(), run_name=name,
                               tags={**{k: scrub(v) for k, v in tags.items()},
                                     "ecntune.role": role})
            rid = run.info.run_id
            now = int(time.time() * 1000)
            c.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
            for f in files:
                c.log_artifact(rid, str(f))
            c.set_terminated(rid, status="FINISHED")
            return str(rid)
        except Exception as exc:  # tracking must never break the command
            self._fail(name, exc)
            return None

    def end_study(self, metrics: dict[str, float], summary: dict[str, Any],
                  status: str = "FINISHED") -> None:
        if self._off() or self.parent_run_id is None:
            return
        try:
            from mlflow.entities import Metric

            c = self.client()
            now = int(time.time() * 1000)
            c.log_batch(self.parent_run_id,
                        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()
                                 if v == v and abs(float(v)) != float("inf")])
            c.log_text(self.parent_run_id, scrub(json.dumps(summary, indent=2, default=str)),
                       "summary.json")
            c.set_terminated(self.parent_run_id, status=status)
        except Exception as exc:
            self._fail("study summary", exc)

    def close_orphan(self, run_id: str) -> None:
        """End a trial run its writer left RUNNING (killed mid-log) when the trial has another,
        finished run already: marked, not counted."""
        c = self.client()
        c.set_tag(run_id, "ecntune.detail", "left RUNNING by a process that was killed while "
                  "logging it; the trial has another, finished run")
        c.set_terminated(run_id, status="KILLED")

    def nested_runs(self) -> list[Any]:
        """The parent run's trial runs (for the back-fill, ``show`` and tests). Always tried,
        even with the breaker open: an answer closes it (the store is back)."""
        c = self.client()
        runs = list(c.search_runs(
            [self._experiment_id()],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
            max_results=10_000))
        self.broken = False
        return runs
