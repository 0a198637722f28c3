"""Rich rendering shared by ``run``, ``resume`` and ``show`` (the CLI is the only printer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.settings import KNOBS

if TYPE_CHECKING:
    from tuner.study import Confirmation, StudyResult, TrialOutcome

# Metrics of the final table: (metric key, label, higher is better).
SUMMARY_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("score", "paired score (log2, 0 = baseline)", True),
    ("busbw_norm", "busbw / line rate", True),
    ("p99_us", "probe p99 latency (µs)", False),
    ("p999_us", "probe p99.9 latency (µs)", False),
    ("pause_us_per_s", "PFC pause (µs/s per NIC port)", False),
    ("pfc_pause_frames", "PFC pause frames received", False),
    ("ecn_marked_pkts", "ECN-marked packets", False),
    ("cnp_sent", "CNPs sent", False),
)


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


class LiveProgress:
    """Progress bar: trial n/N, best score so far, last verdict."""

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=16),
            MofNCompleteColumn(), TextColumn("best [cyan]{task.fields[best]}"),
            TextColumn("last [magenta]{task.fields[last]}"), TimeElapsedColumn(),
            console=console, transient=False, disable=not enabled)
        self.task: Any = None
        self.step: Any = None
        self.report: Any = None

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            verb = "resuming" if data.get("resume") else "running"
            self.console.print(f"{verb} study [bold]{data['study']}[/]: baseline (trial 0), "
                               f"then {data['total']} proposals", highlight=False)
            self.task = self.progress.add_task("trials", total=data["total"],
                                               completed=data["done"], best="-", last="-")
        elif kind == "trial" and self.task is not None:
            out: TrialOutcome = data["outcome"]
            best: TrialOutcome | None = data["best"]
            best_txt = (f"{best.score:.4f} #{best.number}"
                        if best is not None and best.score is not None else "-")
            last = f"#{out.number} {out.verdict}"
            if out.score is not None:
                last += f" {out.score:.4f}"
            self.progress.update(self.task, completed=data["used"], best=best_txt, last=last)
        elif kind == "noise":
            noise = ", ".join(f"{k} {v:.3g}" for k, v in data["noise"].items())
            how = "chosen from the baseline's noise" if data["auto"] else "as configured"
            self.console.print(f"paired replicates per trial: {data['repeats']} ({how}; "
                               f"noise: {noise or 'none measured'})", highlight=False)
        elif kind == "drift":
            self.console.print(f"baseline re-measured after trial {data['after_trial']}: "
                               f"paired score {data['score']:+.3f} (0 = no drift)",
                               highlight=False)
        elif kind == "confirm":
            cands = ", ".join(f"#{n}" for n in data["candidates"]) or "none"
            self.console.print(f"confirming candidates {cands} against the baseline: "
                               f"{data['repeats']} paired repeats on fresh placements, "
                               "interleaved", highlight=False)
            if data["candidates"]:
                self.step = self.progress.add_task("confirm", total=data["repeats"]
                                                   * len(data["candidates"]), best="-",
                                                   last="-")
        elif kind == "confirm_step" and self.step is not None:
            self.progress.update(self.step, completed=data["done"])
        elif kind == "report":
            if self.report is None:
                self.report = self.progress.add_task("report", total=data["total"], best="-",
                                                     last="plots")
            self.progress.update(self.report, completed=data["done"])
        elif kind == "stale":
            self.console.print(f"closed trials left running by a killed process: "
                               f"{data['trials']}")
        elif kind == "running_elsewhere":
            self.console.print(f"left running, their owner is alive or on another machine: "
                               f"trials {data['trials']} (a live run on a shared study)")
        elif kind == "wall_time":
            self.console.print(f"wall-time budget reached after {data['elapsed_s']:.0f} s")


def summary_table(res: StudyResult) -> Table:
    base = res.baseline
    best = res.winner or res.best
    which = "winner" if res.winner is not None else "best candidate, unconfirmed"
    # the trial was picked among the best of these very measurements, so its change reads high
    # (winner's curse): the confirmation on fresh placements, printed below, is the estimate
    t = Table(title=f"the search's measurements: baseline (trial 0) vs {which} (trial "
                    f"{best.number if best else '-'}), means over {res.repeats} paired "
                    "replicates; a candidate for measuring among the best here, so its change "
                    "reads high: the confirmation below is the estimate")
    t.add_column("metric")
    t.add_column("baseline", justify="right")
    t.add_column("best", justify="right")
    t.add_column("change", justify="right")
    for key, label, up in SUMMARY_ROWS:
        b = base.metrics.get(key) if base else None
        w = best.metrics.get(key) if best else None
        if b is None and w is None:
            continue
        change = "-"
        if b is not None and w is not None and b != 0:
            pct = (w - b) / abs(b) * 100
            good = (pct > 0) == up or pct == 0
            change = f"[{'green' if good else 'red'}]{pct:+.1f} %[/]"
        elif b == 0 and w == 0:
            change = "±0 %"
        t.add_row(label, _fmt(b), _fmt(w), change)
    return t


def settings_table(baseline: dict[str, int], best: dict[str, int], title: str) -> Table:
    t = Table(title=title)
    t.add_column("knob")
    t.add_column("unit")
    t.add_column("baseline", justify="right")
    t.add_column("recommended", justify="right")
    for name in KNOBS:
        if name not in best:
            continue
        b, w = baseline.get(name), best[name]
        mark = "" if b == w else " *"
        t.add_row(name, KNOBS[name].unit, _fmt(b) if b is not None else "-", f"{w:,}{mark}")
    return t


def trials_table(trials: list[TrialOutcome], title: str, limit: int | None = None) -> Table:
    t = Table(title=title)
    t.add_column("#", justify="right", no_wrap=True, min_width=3)
    t.add_column("verdict", no_wrap=True)
    for col in ("score", "bw/line", "p99 µs", "PFC µs/s", "kmin", "kmax", "pmax%"):
        t.add_column(col, justify="right", no_wrap=True)
    for o in trials[:limit]:
        m = o.metrics
        t.add_row(str(o.number), o.verdict, _fmt(o.score, 3), _fmt(m.get("busbw_norm"), 3),
                  _fmt(m.get("p99_us"), 3), _fmt(m.get("pause_us_per_s"), 3),
                  _fmt(o.values.get("kmin_bytes")), _fmt(o.values.get("kmax_bytes")),
                  _fmt(o.values.get("pmax_percent")))
    return t


def confirmation_lines(conf: Confirmation | None) -> list[str]:
    """The paired verdict, as ``run`` and ``show`` print it (``tuner.study.verdict_lines``)."""
    from tuner.study import verdict_lines

    return verdict_lines(conf, markup=True)


def print_result(console: Console, res: StudyResult, results_dir: str | None = None) -> None:
    console.print(f"study [bold]{res.study}[/]", highlight=False)
    console.print(summary_table(res))
    for line in confirmation_lines(res.confirmation):
        console.print(line, highlight=False)
    if res.winner is not None and res.baseline is not None:
        console.print(settings_table(res.baseline.values, res.winner.values,
                                     "recommended settings (* = changed)"))
    if res.mode == "multi" and res.pareto:
        console.print(trials_table(res.pareto, "Pareto front (busbw ↑, p99 ↓)"))
    counts: dict[str, int] = {}
    for o in res.trials:
        counts[o.verdict.split(":")[0]] = counts.get(o.verdict.split(":")[0], 0) + 1
    console.print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                  highlight=False)
    k, n = res.rolled_back
    if n:
        after = (f" after the {res.startup_trials} random start-up ones"
                 if res.startup_trials else "")
        console.print(f"rolled back by a safety stop: {k} of {n} proposals{after} "
                      f"({k / n:.0%}); paired replicates per trial: {res.repeats}; canary time "
                      f"saved by early stopping: {res.pruned_saved_s:.3g} s", highlight=False)
    where = ("baseline restored" if res.final == "baseline"
             else f"confirmed winner, trial {res.final.split(':')[1]}, kept")
    console.print(f"canary: {where}")
    for msg in res.tracking_failures[:3]:
        console.print(f"[yellow]warning:[/] {msg}")
    console.print(f"Optuna storage: {res.storage}", highlight=False, soft_wrap=True)
    console.print(f"MLflow store:   {res.tracking_uri or 'off (--no-mlflow)'}",
                  highlight=False, soft_wrap=True)
    where_opt = f" --results {results_dir}" if results_dir else ""
    console.print(f"next: ecntune export {res.study}{where_opt}", highlight=False,
                  soft_wrap=True)
    if res.tracking_uri:
        console.print(f"      mlflow ui --backend-store-uri {res.tracking_uri}",
                      highlight=False, soft_wrap=True)
    if res.mlflow_experiment_id:
        console.print(f"      then open http://127.0.0.1:5000/#/experiments/"
                      f"{res.mlflow_experiment_id}/runs?workflowType=machine_learning",
                      highlight=False, soft_wrap=True)
