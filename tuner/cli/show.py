"""``ecntune show [STUDY]``: best trials, Pareto front and verdicts of a stored study."""

from __future__ import annotations

import click

from tuner.cli import handle_errors


@click.command("show")
@click.argument("study", metavar="[STUDY|RESULTS_DIR]", required=False)
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many trials to list, best first.")
@handle_errors
def command(study: str | None, storage: str | None, results: str | None, top: int) -> None:
    """Show STUDY (default: the newest): baseline, best trials, Pareto front, verdicts."""
    from rich.console import Console
    from rich.table import Table

    from tuner import optuna_io, study_store
    from tuner import study as studies
    from tuner.cli._render import confirmation_lines, settings_table, trials_table
    from tuner.cli.resume import locate
    from tuner.diagnose import record
    from tuner.errors import ConfigError
    from tuner.plots import kind
    from tuner.report import verdict_meaning

    url, study = locate(study, storage, results)
    names = optuna_io.study_names(url)
    if not names:
        raise ConfigError(f"no studies in {url}")
    name = study or names[-1]
    st = optuna_io.load_study(name, url)
    console = Console(width=max(Console().width, 160))  # never cut values at 80 columns
    trials = studies.outcomes(st)
    base = studies.baseline(st)
    win = studies.winner(st)
    ranked = sorted((o for o in trials if o.score is not None and o.state == "COMPLETE"),
                    key=lambda o: -(o.score or 0.0))
    console.print(f"study {name} ({study_store.info(st).mode}), {len(trials)} "
                  f"trials, storage {url}")
    info = study_store.info(st)
    # what the preflight diagnosis found (#23)
    for line in record.lines(info.findings, info.findings_accepted):
        console.print(line, highlight=False, markup=False)
    if base is not None:
        console.print(f"baseline (trial {base.number}): paired score 0 by construction, "
                      f"{study_store.info(st).repeats} paired replicates per trial")
    console.print(trials_table(ranked, f"best {min(top, len(ranked))} completed trials", top))
    if len(st.directions) > 1:
        console.print(trials_table(studies.pareto(st), "Pareto front of the feasible trials "
                                                       "(busbw ↑, p99 ↓)"))
    for line in confirmation_lines(studies.confirmation(st)):
        console.print(line, highlight=False)
    if win is not None and base is not None:
        console.print(settings_table(base.values, win.values,
                                     f"recommended: trial {win.number}, confirmed "
                                     "(* = changed)"))
    counts: dict[str, int] = {}
    example: dict[str, tuple[int, str]] = {}
    for t in optuna_io.trials(st):
        tags = study_store.tags(t)
        v = tags.verdict if tags.verdict != "?" else t.state.name
        counts[v] = counts.get(v, 0) + 1
        if kind(v) not in ("ok", "baseline") and v not in example:
            example[v] = (t.number, tags.detail or verdict_meaning(v))
    console.print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                  highlight=False)
    twin = study_store.twin_trials(st)
    if twin is not None:
        console.print(f"twin trials: {twin} on the digital twin "
                      "(sampler twin; not canary trials, not counted in the budget)",
                      highlight=False)
    if example:
        why = Table(title="why trials were not kept (first example of each)")
        for col in ("verdict", "trials", "e.g. trial", "detail"):
            why.add_column(col)
        for v, (n, detail) in sorted(example.items()):
            why.add_row(v, str(counts[v]), str(n), detail[:200])
        console.print(why)
