"""``ecntune resume [STUDY]``: continue an interrupted study from its Optuna storage."""

from __future__ import annotations

from pathlib import Path

import click

from tuner.cli import handle_errors


def default_storage(results: str | None) -> str:
    return f"sqlite:///{Path(results or 'results') / 'optuna.db'}"


@click.command("resume")
@click.argument("study", required=False)
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--experiment", type=click.Path(dir_okay=False, path_type=Path),
              help="Experiment file to use instead of the copy stored with the study.")
@click.option("--trials", type=click.IntRange(min=1), help="New total budget of trials.")
@click.option("--keep-best", is_flag=True, help="Leave the canary on the best trial's settings.")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@handle_errors
def command(study: str | None, storage: str | None, results: str | None,
            experiment: Path | None, trials: int | None, keep_best: bool, no_mlflow: bool,
            quiet: bool) -> None:
    """Continue STUDY (default: the newest study in the storage) up to its trial budget.

    Completed trials are kept; a trial a killed process left running is closed as
    `interrupted` and does not count against the budget. The experiment file stored with the
    study is used unless --experiment is given.
    """
    from tuner.cli.run import execute
    from tuner.loop import load_for_resume

    url = storage or default_storage(results)
    name, text = load_for_resume(url, study)
    source = f"<experiment stored with study {name}>"
    if experiment is not None:
        text, source = experiment.read_text(encoding="utf-8"), str(experiment)
    execute(text, source, study=name, resume=True, trials=trials, keep_best=keep_best,
            results=results, no_mlflow=no_mlflow, quiet=quiet)
