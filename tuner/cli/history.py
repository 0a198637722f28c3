"""``ecntune history``: studies and trials from MLflow, filtered, or two studies compared."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from tuner.cli import handle_errors

if TYPE_CHECKING:
    from rich.table import Table

    from tuner.history import Comparison, StudyRow, TrialRow


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{v:+.1f} %"
    if float(v).is_integer() and abs(v) >= 10:
        return f"{int(v):,}"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def studies_table(rows: list[StudyRow]) -> Table:
    from rich.table import Table

    from tuner.plots import TRIAL_COUNTS

    t = Table(title=f"{len(rows)} studies (newest first)")
    for col in ("study", "experiment", "cluster", "started (UTC)", "status", "trials",
                "ok", "rolled back", "rejected", "screened", "best score",
                "confirmed gain [95 % CI]"):
        t.add_column(col, justify="left" if col in ("study", "experiment", "cluster",
                                                     "started (UTC)", "status") else "right")
    for r in rows:
        m = r.metrics
        n = sum(int(m.get(k, 0)) for k in TRIAL_COUNTS)
        t.add_row(r.study, r.experiment, r.cluster or "-", r.started, r.status, str(n),
                  _fmt(m.get("trials_ok")), _fmt(m.get("trials_rolled_back")),
                  _fmt(m.get("trials_rejected")), _fmt(m.get("trials_screened")),
                  _fmt(m.get("best_score")), _gain(m))
    return t


def _gain(m: dict[str, float]) -> str:
    """The confirmed winner's busbw change with its interval, or why there is none."""
    if "confirmed" not in m:
        return "-"
    if not m["confirmed"]:
        return "none confirmed"
    if "confirmed_busbw_change_percent" not in m:
        return "confirmed"
    return (f"busbw {m['confirmed_busbw_change_percent']:+.1f} % "
            f"[{m.get('confirmed_busbw_ci95_low', float('nan')):+.1f}, "
            f"{m.get('confirmed_busbw_ci95_high', float('nan')):+.1f}]")


def trials_table(rows: list[TrialRow]) -> Table:
    from rich.table import Table

    t = Table(title=f"{len(rows)} trials")
    for col in ("study", "trial", "verdict", "score", "busbw/line", "p99 µs", "PFC µs/s",
                "kmin_bytes", "kmax_bytes", "pmax %", "detail"):
        t.add_column(col, justify="left" if col in ("study", "verdict", "detail") else "right",
                     overflow="fold")
    for r in rows:
        m, p = r.metrics, r.params
        t.add_row(r.study, str(r.trial), r.verdict, _fmt(m.get("score")),
                  _fmt(m.get("busbw_norm")), _fmt(m.get("p99_us")),
                  _fmt(m.get("pause_us_per_s")), p.get("kmin_bytes", "-"),
                  p.get("kmax_bytes", "-"), p.get("pmax_percent", "-"), r.detail[:60])
    return t


def compare_tables(c: Comparison) -> list[Table]:
    from rich.table import Table

    from tuner.history import BEST_METRICS, STUDY_METRICS, searched_knobs
    from tuner.report import change
    from tuner.settings import KNOBS

    a, b = c.a.study, c.b.study
    out = []
    s = Table(title=f"{a}  vs  {b}")
    for col in ("", a, b, "change"):
        s.add_column(col, justify="left" if not col else "right")
    s.add_row("started (UTC)", c.a.started, c.b.started, "")
    s.add_row("cluster", c.a.cluster or "-", c.b.cluster or "-", "")
    for k in STUDY_METRICS:
        va, vb = c.a.metrics.get(k), c.b.metrics.get(k)
        pct = k.startswith("confirmed_")
        # a paired score is already relative to its baseline: its change is a difference
        delta = f"{vb - va:+.3f}" if k == "best_score" and va is not None and vb is not None \
            else ""
        s.add_row(k, _fmt(va, pct), _fmt(vb, pct), delta)
    verdicts = sorted(set(c.verdicts_a) | set(c.verdicts_b))
    for v in verdicts:
        s.add_row(f"verdict {v}", str(c.verdicts_a.get(v, 0)), str(c.verdicts_b.get(v, 0)), "")
    out.append(s)
    if c.best_a is not None and c.best_b is not None:
        t = Table(title=f"best trials: {a} #{c.best_a.trial}  vs  {b} #{c.best_b.trial}")
        for col in ("metric", a, b, "change"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for key, label, up in BEST_METRICS:
            va, vb = c.best_a.metrics.get(key), c.best_b.metrics.get(key)
            if va is None and vb is None:
                continue
            text, cls = change(va, vb, up)
            colour = {"good": "green", "bad": "red"}.get(cls, "dim")
            t.add_row(label, _fmt(va), _fmt(vb), f"[{colour}]{text}[/]")
        out.append(t)
        searched = searched_knobs(c.a) | searched_knobs(c.b)
        knobs = Table(title="recommended settings of the searched knobs (* = differs)")
        for col in ("knob", "unit", a, b):
            knobs.add_column(col, justify="left" if col in ("knob", "unit") else "right")
        same = 0
        for name, knob in KNOBS.items():
            pa, pb = c.best_a.params.get(name), c.best_b.params.get(name)
            if pa is None and pb is None:
                continue
            if name not in searched and pa == pb:
                same += 1
                continue
            mark = " *" if pa != pb else ""
            knobs.add_row(name + mark, knob.unit, pa or "-", pb or "-")
        knobs.caption = f"{same} other knobs equal in both" if same else None
        out.append(knobs)
    if c.setup_diff:
        d = Table(title="what differs in the set-up")
        for col in ("what", a, b):
            d.add_column(col, overflow="fold")
        for what, in_a, in_b in c.setup_diff:
            d.add_row(what, in_a, in_b)
        out.append(d)
    return out


def _as_json(obj: Any) -> str:
    from dataclasses import asdict, is_dataclass

    def conv(o: Any) -> Any:
        if is_dataclass(o) and not isinstance(o, type):
            return asdict(o)
        if isinstance(o, list):
            return [conv(x) for x in o]
        return o

    return json.dumps(conv(obj), indent=1, default=str)


@click.command("history")
@click.option("--results", default="results", show_default=True,
              help="Results folder: its mlflow.db and <dir>/*/mlflow.db are read.")
@click.option("--tracking-uri", "uris", multiple=True,
              help="MLflow store or server to read instead (repeatable), e.g. "
                   "http://127.0.0.1:5000 or sqlite:///results/quick/mlflow.db.")
@click.option("--cluster", help="Only studies on this cluster (tag ecntune.cluster).")
@click.option("--experiment", help="Only studies of this experiment (its name: field).")
@click.option("--study", help="Only this study.")
@click.option("--verdict", help="Trials with this verdict: a kind (rolled_back, rejected, ok, "
                                "failed) or an exact verdict (rolled_back:pfc_storm). "
                                "Implies --trials.")
@click.option("--since", help="Started on or after (YYYY-MM-DD or ISO date-time, UTC).")
@click.option("--until", help="Started before (a bare date includes that day).")
@click.option("--trials", "show_trials", is_flag=True, help="List trials instead of studies.")
@click.option("--compare", nargs=2, metavar="STUDY_A STUDY_B",
              help="Compare two studies side by side (e.g. before and after a mix change).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def command(results: str, uris: tuple[str, ...], cluster: str | None,
            experiment: str | None, study: str | None, verdict: str | None,
            since: str | None, until: str | None, show_trials: bool,
            compare: tuple[str, str] | None, as_json: bool) -> None:
    """What was tried on which cluster, and how studies compare, read from MLflow's search
    API (a local store or a shared server). Lists studies by default; --trials or --verdict
    lists trials; --compare A B puts two studies side by side: summary, verdicts, best trial
    metrics, recommended settings and what differs in their set-up (parameters and the
    workload mix)."""
    from rich.console import Console

    from tuner.errors import ConfigError
    from tuner.history import Filters, History, parse_when, stores

    targets = list(uris) or stores(results)
    if not targets:
        raise ConfigError(f"{results}: no mlflow.db here or in its sub-folders; pass "
                          "--results DIR or --tracking-uri URI")
    h = History(targets)
    console = Console(width=None if sys.stdout.isatty() else 220)  # tables, not wrapped cells
    if compare:
        cmp = h.compare(*compare)
        if as_json:
            click.echo(_as_json(cmp))
            return
        for table in compare_tables(cmp):
            console.print(table)
        return
    f = Filters(cluster=cluster, experiment=experiment, verdict=verdict, study=study,
                since_ms=parse_when(since) if since else None,
                until_ms=parse_when(until, end=True) if until else None)
    if show_trials or verdict:
        trials = h.trials(f)
        if as_json:
            click.echo(_as_json(trials))
        else:
            console.print(trials_table(trials))
        return
    rows = h.studies(f)
    if as_json:
        click.echo(_as_json(rows))
    else:
        console.print(studies_table(rows))
