"""``ecntune resume [STUDY]``: continue an interrupted study from its Optuna storage."""

from __future__ import annotations

from pathlib import Path

import click

from tuner.cli import handle_errors


def default_storage(results: str | None) -> str:
    return f"sqlite:///{Path(results or 'results') / 'optuna.db'}"


def locate(target: str | None, storage: str | None, results: str | None
           ) -> tuple[str, str | None]:
    """(storage URL, study name or None for the newest) from what the user typed.

    TARGET may be a study name or a results folder (``results/quick``); without --storage and
    --results, a study name is looked up in ``results/optuna.db`` and ``results/*/optuna.db``.
    """
    from tuner import optuna_io
    from tuner.errors import ConfigError

    if target is not None and Path(target).is_dir():
        if not (Path(target) / "optuna.db").exists():
            raise ConfigError(f"{target}: no optuna.db in this results folder")
        return storage or default_storage(target), None
    if storage or results or target is None:
        url = storage or default_storage(results)
        if target is None and not storage and not results:
            dbs = sorted(Path("results").glob("*/optuna.db"), key=lambda p: p.stat().st_mtime)
            if dbs and not Path("results/optuna.db").exists():
                url = f"sqlite:///{dbs[-1]}"
        return url, target
    for db in [Path("results/optuna.db"), *sorted(Path("results").glob("*/optuna.db"))]:
        if db.exists() and target in optuna_io.study_names(f"sqlite:///{db}"):
            return f"sqlite:///{db}", target
    raise ConfigError(f"study {target!r} not found in results/optuna.db or "
                      "results/*/optuna.db; pass --results DIR or --storage URL")


@click.command("resume")
@click.argument("study", metavar="[STUDY|RESULTS_DIR]", required=False)
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
    """Continue STUDY (a name or a results folder; default: the newest) up to its budget (the
    one it was started with, `run --trials` included, unless --trials gives a new total).

    Completed trials are kept; a trial a killed process left running is closed as
    `interrupted` and does not count against the budget. The experiment file stored with the
    study is used unless --experiment is given.
    """
    from tuner.cli.run import execute
    from tuner.study import load_for_resume

    url, study = locate(study, storage, results)
    if results is None and url.startswith("sqlite:///"):
        results = str(Path(url.removeprefix("sqlite:///")).parent)
    name, text = load_for_resume(url, study)
    source = f"<experiment stored with study {name}>"
    if experiment is not None:
        from tuner.input_checks import read_text_file

        text, source = read_text_file(experiment, "experiment file"), str(experiment)
    from tuner import optuna_io, study_store
    from tuner.lifecycle.retune import resumed, same_store

    st = optuna_io.load_study(name, url)  # logs where it started; a re-tune stays one
    info = study_store.info(st)
    store = info.mlflow_tracking_uri or ""
    if trials is None and info.trials_budget is not None:
        trials = int(info.trials_budget)  # the budget it was started with
    elif trials is not None:
        study_store.record(st, trials_budget=trials)  # the new total, for a later resume
    execute(text, source, study=name, resume=True, trials=trials, keep_best=keep_best,
            results=results, no_mlflow=no_mlflow, quiet=quiet, runner_options=resumed(st),
            prepare=lambda exp: same_store(exp, store))
