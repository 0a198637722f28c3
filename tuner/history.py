"""What was tried, where and when: studies and trials read back from MLflow.

Everything goes through MLflow's search API (``MlflowClient.search_experiments`` /
``search_runs``, artifacts through ``download_artifacts``), never by opening its store, so the
same code reads a local SQLite store and a shared ``mlflow server``. It relies on the layout
``tuner.tracking`` writes: parent runs tagged ``ecntune.role=study`` (plus ``ecntune.study``,
``ecntune.cluster``), nested runs tagged ``ecntune.role=trial`` with ``ecntune.trial``,
``ecntune.verdict`` and ``mlflow.parentRunId``.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import ConfigError
from tuner.plots import TRIAL_COUNTS

# Metrics shown side by side for the best trial of each study: (key, label, higher is better).
BEST_METRICS: tuple[tuple[str, str, bool | None], ...] = (
    ("score", "score", True),
    ("busbw_norm", "busbw / line rate", True),
    ("p50_us", "probe p50 (µs)", False),
    ("p99_us", "probe p99 (µs)", False),
    ("p999_us", "probe p99.9 (µs)", False),
    ("pause_us_per_s", "PFC pause (µs/s per port)", False),
    ("ecn_marked_pkts", "ECN-marked packets", None),
    ("cnp_sent", "CNPs sent", None),
    ("lossless_drops", "lossless drops", False),
)
_PROGRESS = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
STUDY_METRICS = ("best_score", "confirmed", "confirmed_busbw_change_percent",
                 "confirmed_busbw_ci95_low", "confirmed_busbw_ci95_high", *TRIAL_COUNTS)


def _quote(v: str) -> str:
    if "'" in v:
        raise ConfigError(f"filter value {v!r}: quotes are not allowed")
    return f"'{v}'"


def parse_when(text: str, end: bool = False) -> int:
    """``YYYY-MM-DD`` or an ISO date-time (UTC unless it says otherwise) as epoch ms; a bare
    date used as an upper bound means the end of that day."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"date {text!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    if end and len(text) == 10:
        when += dt.timedelta(days=1)
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class Filters:
    """What to look for; ``None`` means any."""

    cluster: str | None = None
    experiment: str | None = None  # the experiment's ``name:`` (param ``experiment``)
    verdict: str | None = None  # ``rolled_back`` (any code) or ``rolled_back:pfc_storm``
    since_ms: int | None = None
    until_ms: int | None = None
    study: str | None = None

    def clauses(self, role: str) -> list[str]:
        out = [f"tags.`ecntune.role` = '{role}'"]
        if self.since_ms is not None:
            out.append(f"attributes.start_time >= {self.since_ms}")
        if self.until_ms is not None:
            out.append(f"attributes.start_time < {self.until_ms}")
        if role == "study":
            if self.cluster:
                out.append(f"tags.`ecntune.cluster` = {_quote(self.cluster)}")
            if self.experiment:
                out.append(f"params.experiment = {_quote(self.experiment)}")
            if self.study:
                out.append(f"tags.`ecntune.study` = {_quote(self.study)}")
        elif self.verdict:
            op = "=" if ":" in self.verdict else "LIKE"
            val = self.verdict if ":" in self.verdict else f"{self.verdict}%"
            out.append(f"tags.`ecntune.verdict` {op} {_quote(val)}")
        return out


@dataclass
class StudyRow:
    run_id: str
    experiment_id: str
    study: str
    experiment: str
    cluster: str
    backend: str
    start_ms: int
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    store: str = ""
    storage: str = ""  # the study's Optuna storage (tag ``ecntune.storage``)

    @property
    def started(self) -> str:
        return dt.datetime.fromtimestamp(self.start_ms / 1000, dt.UTC).strftime(
            "%Y-%m-%d %H:%M")


@dataclass
class TrialRow:
    run_id: str
    study: str
    trial: int
    state: str
    verdict: str
    detail: str
    start_ms: int
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class Comparison:
    """Two studies side by side (``a`` = before, ``b`` = after)."""

    a: StudyRow
    b: StudyRow
    best_a: TrialRow | None
    best_b: TrialRow | None
    verdicts_a: dict[str, int]
    verdicts_b: dict[str, int]
    setup_diff: list[tuple[str, str, str]]  # (what, in a, in b)


class History:
    """Read-only view of one or more MLflow stores (``uris``)."""

    def __init__(self, uris: list[str]) -> None:
        if not uris:
            raise ConfigError("no MLflow store given (--tracking-uri or --results)")
        from tuner.tracking import Tracker

        self.clients = {u: Tracker(u, "", ".").client() for u in uris}

    def _experiments(self, client: Any) -> list[str]:
        """Every experiment: ``tracking.experiment`` may name it anything; the role tags
        pick out ecntune's runs."""
        return [e.experiment_id for e in client.search_experiments(max_results=1000)]

    def _search(self, role: str, f: Filters, extra: list[str] | None = None
                ) -> list[tuple[str, Any]]:
        flt = " and ".join(f.clauses(role) + (extra or []))
        out = []
        for uri, c in self.clients.items():
            ids = self._experiments(c)
            if not ids:
                continue
            for run in c.search_runs(ids, filter_string=flt, max_results=50_000,
                                     order_by=["attributes.start_time DESC"]):
                out.append((uri, run))
        return out

    @staticmethod
    def _study_row(uri: str, run: Any) -> StudyRow:
        tags, params = run.data.tags, run.data.params
        return StudyRow(
            run_id=run.info.run_id, experiment_id=run.info.experiment_id,
            study=tags.get("ecntune.study", run.info.run_name or ""),
            experiment=params.get("experiment", ""), cluster=tags.get("ecntune.cluster", ""),
            backend=params.get("backend", ""), start_ms=int(run.info.start_time or 0),
            status=run.info.status, metrics=dict(run.data.metrics), params=dict(params),
            store=uri, storage=tags.get("ecntune.storage", ""))

    @staticmethod
    def _trial_row(study: str, run: Any) -> TrialRow:
        tags = run.data.tags
        return TrialRow(run_id=run.info.run_id, study=study,
                        trial=int(tags.get("ecntune.trial", -1)),
                        state=tags.get("ecntune.state", ""),
                        verdict=tags.get("ecntune.verdict", ""),
                        detail=tags.get("ecntune.detail", ""),
                        start_ms=int(run.info.start_time or 0), metrics=dict(run.data.metrics),
                        params=dict(run.data.params))

    def studies(self, f: Filters = Filters()) -> list[StudyRow]:
        """Parent runs matching ``f``, newest first."""
        rows = [self._study_row(u, r) for u, r in self._search("study", f)]
        return sorted(rows, key=lambda r: -r.start_ms)

    def studies_named(self, name: str) -> list[StudyRow]:
        return self.studies(Filters(study=name))

    def study(self, name: str) -> StudyRow:
        found = self.studies_named(name)
        if not found:
            raise ConfigError(f"no study {name!r} in MLflow ({', '.join(self.clients)})")
        return found[0]

    def trials(self, f: Filters = Filters()) -> list[TrialRow]:
        """Nested trial runs of the studies matching ``f`` (verdict/date apply to trials),
        ordered by study (newest first) then trial number."""
        parents = self.studies(Filters(cluster=f.cluster, experiment=f.experiment,
                                       study=f.study))
        names = {p.run_id: p.study for p in parents}
        if not names:
            return []
        tf = Filters(verdict=f.verdict, since_ms=f.since_ms, until_ms=f.until_ms)
        # MLflow has no IN for tags: one parent is an equality, several a filter here
        extra = ([f"tags.mlflow.parentRunId = '{next(iter(names))}'"] if len(names) == 1
                 else [])
        out = [self._trial_row(names[pid], run) for _uri, run in self._search("trial", tf, extra)
               if (pid := run.data.tags.get("mlflow.parentRunId")) in names]
        order = {p.run_id: i for i, p in enumerate(parents)}
        by_name = {p.study: order[p.run_id] for p in parents}
        return sorted(out, key=lambda t: (by_name.get(t.study, 0), t.trial))

    def compare(self, a: str, b: str) -> Comparison:
        """Study ``a`` against study ``b``: summary metrics, best trial, verdicts, setup."""
        ra, rb = self.study(a), self.study(b)
        ta, tb = self.trials(Filters(study=a)), self.trials(Filters(study=b))
        return Comparison(a=ra, b=rb, best_a=_best(ra, ta), best_b=_best(rb, tb),
                          verdicts_a=_verdicts(ta), verdicts_b=_verdicts(tb),
                          setup_diff=self._setup_diff(ra, rb))

    def _setup_diff(self, a: StudyRow, b: StudyRow) -> list[tuple[str, str, str]]:
        """Parent params that differ, then the workload mix (from ``experiment.yaml``)."""
        skip = {"study"}
        out = [(k, a.params.get(k, "-"), b.params.get(k, "-"))
               for k in sorted(set(a.params) | set(b.params))
               if k not in skip and a.params.get(k) != b.params.get(k)]
        wa, wb = self._workload(a), self._workload(b)
        for i in range(max(len(wa), len(wb))):
            pa = wa[i] if i < len(wa) else "-"
            pb = wb[i] if i < len(wb) else "-"
            if pa != pb:
                out.append((f"workload part {i + 1}", pa, pb))
        return out

    def _workload(self, row: StudyRow) -> list[str]:
        """The workload parts of a study as one line each (empty if not logged)."""
        import yaml

        client = self.clients[row.store]
        bar = os.environ.get(_PROGRESS)
        os.environ[_PROGRESS] = "false"  # no download progress bar on the terminal
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = client.download_artifacts(row.run_id, "experiment.yaml", tmp)
                doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            except Exception:  # an older run without the file: compare params only
                return []
            finally:
                if bar is None:
                    os.environ.pop(_PROGRESS, None)
                else:
                    os.environ[_PROGRESS] = bar
        parts = (doc or {}).get("workload", {}).get("parts", [])
        return [", ".join(f"{k}={v}" for k, v in p.items()) for p in parts]


def searched_knobs(row: StudyRow) -> set[str]:
    """Knobs the study searched (parent params ``space.<dim>``; ``kmax_ratio`` sets
    ``kmax_bytes``)."""
    dims = {k.removeprefix("space.") for k in row.params if k.startswith("space.")}
    return dims | ({"kmax_bytes"} if "kmax_ratio" in dims else set())


def _verdicts(trials: list[TrialRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trials:
        out[t.verdict] = out.get(t.verdict, 0) + 1
    return dict(sorted(out.items()))


def _best(study: StudyRow, trials: list[TrialRow]) -> TrialRow | None:
    """The trial the study recorded as best (metric ``best_trial``), else the top score."""
    n = study.metrics.get("best_trial")
    if n is not None:
        for t in trials:
            if t.trial == int(n):
                return t
    scored = [t for t in trials if "score" in t.metrics and t.verdict in ("ok", "baseline")]
    return max(scored, key=lambda t: t.metrics["score"]) if scored else None


def stores(results: str | Path) -> list[str]:
    """The MLflow stores of a results folder: ``<dir>/mlflow.db`` and ``<dir>/*/mlflow.db``."""
    root = Path(results)
    dbs = [root / "mlflow.db", *sorted(root.glob("*/mlflow.db"))]
    return [f"sqlite:///{p}" for p in dbs if p.is_file()]
