"""``ecntune retune --from STUDY EXPERIMENT``: a new study for a new traffic mix, linked to the
study that tuned the old one and warm-started with its confirmed winners (re-measured, never
reused). See ``tuner/lifecycle/retune.py`` for what the summary means."""

from __future__ import annotations

from pathlib import Path

import click

from tuner.cli import handle_errors


@click.command("retune")
@click.option("--from", "old", required=True, metavar="STUDY|RESULTS_DIR",
              help="The study that tuned the old mix (name or results folder).")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--top", default=3, show_default=True, type=click.IntRange(1, 20),
              help="How many of the old study's confirmed candidates to start from.")
@click.option("--from-storage", help="Optuna storage of the old study (default: found in "
                                     "results/).")
@click.option("--study", help="Name of the new study (default: <experiment>-<UTC time>).")
@click.option("--trials", type=click.IntRange(min=1), help="Override budget.trials.")
@click.option("--results", help="Override results_dir of the new study.")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@handle_errors
def command(old: str, experiment: Path, top: int, from_storage: str | None, study: str | None,
            trials: int | None, results: str | None, no_mlflow: bool, quiet: bool) -> None:
    """Re-tune for the mix in EXPERIMENT, starting from STUDY's confirmed winners.

    The new study's trial 0 measures the canary as deployed; the old study's choice (its
    confirmed winner, or its baseline) and its best confirmed candidates follow, re-measured
    under the new mix; the summary gives the old choice's paired result on the new mix and what
    the re-tune recovered over it. It logs to the old study's MLflow store unless EXPERIMENT
    names one (the two parent runs are linked by tag).
    """
    from tuner import optuna_io
    from tuner.cli.run import execute
    from tuner.errors import ConfigError
    from tuner.lifecycle import retune as rt
    from tuner.lifecycle.winner import open_study

    prior, url = open_study(old, from_storage, None)
    points = rt.warm_points(prior, top)
    try:
        text = experiment.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{experiment}: cannot read experiment file: {exc.strerror}") from None
    link = rt.lineage(prior, url)
    res = execute(text, str(experiment), study=study, resume=False, trials=trials,
                  keep_best=False, results=results, no_mlflow=no_mlflow, quiet=quiet,
                  runner_options={"warm": points, "lineage": link,
                                  "summarize": rt.summary_for_tracking},
                  prepare=lambda exp: rt.same_store(exp, link["retuned_from_tracking"]))
    summary = rt.summarize(optuna_io.load_study(res.study, res.storage))
    for line in summary.lines():
        click.echo(line)
    if res.parent_run_id and res.tracking_uri:
        old_run = link["retuned_from_run"]
        where = ("the same store" if link["retuned_from_tracking"] == res.tracking_uri
                 else link["retuned_from_tracking"] or "no MLflow store (not logged)")
        click.echo(f"  MLflow: parent run {res.parent_run_id} in {res.tracking_uri} "
                   f"(metrics retune_*, summary.json 'retune'), linked by tag "
                   f"ecntune.retuned_from_run to {old_run or '-'} in {where}")

