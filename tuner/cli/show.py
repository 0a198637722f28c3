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

    from tuner import optuna_io
    from tuner.cli._render import settings_table, trials_table
    from tuner.cli.resume import locate
    from tuner.errors import ConfigError
    from tuner.loop import outcome_of, recommended

    url, study = locate(study, storage, results)
    names = optuna_io.study_names(url)
    if not names:
        raise ConfigError(f"no studies in {url}")
    name = study or names[-1]
    st = optuna_io.load_study(name, url)
    console = Console()
    trials = [outcome_of(t) for t in optuna_io.trials(st)]
    base = next((o for o in trials if o.is_baseline and o.state == "COMPLETE"), None)
    best, front = recommended(st)
    ranked = sorted((o for o in trials if o.score is not None and o.state == "COMPLETE"),
                    key=lambda o: -(o.score or 0.0))
    console.print(f"study {name} ({st.user_attrs.get('mode', 'scalar')}), {len(trials)} "
                  f"trials, storage {url}")
    if base is not None:
        console.print(f"baseline (trial {base.number}) score {base.score:.4f}")
    console.print(trials_table(ranked, f"best {min(top, len(ranked))} completed trials", top))
    if len(st.directions) > 1:
        console.print(trials_table(front, "Pareto front (busbw ↑, p99 ↓, PFC budget as "
                                          "constraint)"))
    if best is not None and base is not None:
        console.print(settings_table(base.values, best.values,
                                     f"recommended: trial {best.number} (* = changed)"))
    counts: dict[str, int] = {}
    for o in trials:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    console.print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
