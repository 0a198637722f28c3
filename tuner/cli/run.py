"""``ecntune run EXPERIMENT``: run a study from an experiment file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tuner.cli import handle_errors


def overridden(exp: Any, *, trials: int | None, results: str | None, no_mlflow: bool) -> Any:
    """The experiment with the command line's ``--trials``, ``--results`` and ``--no-mlflow``."""
    update: dict[str, object] = {}
    if trials is not None:
        update["budget"] = exp.budget.model_copy(update={"trials": trials})
    if results is not None:
        update["results_dir"] = results
    if no_mlflow:
        update["tracking"] = exp.tracking.model_copy(update={"enabled": False})
    return exp.model_copy(update=update) if update else exp


def execute(exp_text: str, source: str, *, study: str | None, resume: bool, trials: int | None,
            keep_best: bool, results: str | None, no_mlflow: bool, quiet: bool,
            runner_options: dict[str, Any] | None = None,
            prepare: Callable[[Any], Any] | None = None, accept_findings: bool = False) -> Any:
    """Shared by ``run``, ``resume`` and ``retune``: build everything, run, print the result
    (returned too). ``runner_options`` go to ``StudyRunner`` (retune: warm, lineage);
    ``prepare`` adjusts the parsed experiment (retune: log to the old study's MLflow store).
    A new study first diagnoses the fabric; a dominant finding stops it (exit 3) unless
    ``accept_findings``."""
    from rich.console import Console

    from safety.lock import hold
    from tuner.experiment import check_name, parse_experiment
    from tuner.input_checks import check_inputs, check_twin
    from tuner.loop import default_study_name
    from tuner.tracking import redact

    if study is not None:
        check_name(study, "--study")  # it names a folder under the results: never '..'
    exp = overridden(parse_experiment(exp_text, source), trials=trials, results=results,
                     no_mlflow=no_mlflow)
    if prepare is not None:
        exp = prepare(exp)
    name = study or default_study_name(exp)
    console = Console(stderr=False)
    for field_name, what in exp.safety.beyond_bounds().items():
        click.echo(f"{source}: safety.{field_name} = {what}: past its bound (--i-know); "
                   "logged to MLflow as ecntune.i_know", err=True)
    check_inputs(exp, source)  # contradictions between fields: exit 2, nothing touched
    check_twin(exp, source)
    exp = _without_credentials(exp, source)
    with hold(exp.results_path, "resume" if resume else "run"):  # one tuner per canary
        # only the redacted text is stored (Optuna user attrs, MLflow artifact)
        return _run_locked(exp, redact(exp_text), source, name, console, keep_best, resume,
                           quiet, runner_options or {}, accept_findings)


def _without_credentials(exp: Any, source: str) -> Any:
    """URL passwords move into the drivers' environment variables: no stored or printed URL
    holds them (``tuner.tracking.move_url_credentials``)."""
    import os

    from tuner.errors import ConfigError
    from tuner.tracking import move_url_credentials

    try:
        urls, env = move_url_credentials({"storage": exp.storage,
                                          "tracking.uri": exp.tracking.uri})
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    os.environ.update(env)
    return exp.model_copy(update={"storage": urls["storage"], "tracking": exp.tracking.model_copy(
        update={"uri": urls["tracking.uri"]})})


def diagnose_before_tuning(exp: Any, cluster: Any, console: Any,
                           accept: bool) -> list[dict[str, Any]]:
    """The cheap checks of ``diagnose`` (the fabric layer): print what they find; refuse to
    tune around a dominant non-congestion cause (``SafetyAbort``, exit 3) unless ``accept``.
    Returns the findings to store with the study."""
    from tuner.diagnose import record
    from tuner.diagnose.fabric import check
    from tuner.errors import SafetyAbort

    findings, not_checked = check(cluster, exp)
    for f in findings:
        console.print(f"finding: {record.line(f)}", highlight=False, markup=False)
    for n in not_checked:
        console.print(f"not checked: {n.layer}/{n.check} on {n.where}: {n.reason}",
                      highlight=False, markup=False)
    dominant = [f for f in findings if f.dominant]
    if dominant and not accept:
        raise SafetyAbort("refusing to tune", (
            f"{len(dominant)} finding(s) tuning would only paper over: "
            + "; ".join(f"{f.check} on {f.where}" for f in dominant)
            + " -- fix the cause (actions above) or rerun with --accept-findings"))
    return [f.model_dump() for f in findings]


def _run_locked(exp: Any, exp_text: str, source: str, name: str, console: Any,
                keep_best: bool, resume: bool, quiet: bool,
                runner_options: dict[str, Any], accept_findings: bool = False) -> Any:
    from tuner.cli._render import LiveProgress, print_result
    from tuner.cli.preflight import gate
    from tuner.cluster import build_cluster
    from tuner.loop import StudyRunner

    cluster = build_cluster(exp, source)
    try:  # pre-flight: a failed check stops the study before any change
        gate(exp, cluster, console, source=source)
        if not resume:  # a resumed study keeps the findings it started under
            runner_options = {**runner_options, "findings": diagnose_before_tuning(
                exp, cluster, console, accept_findings), "findings_accepted": accept_findings}
    except BaseException:
        cluster.close()
        raise
    with cluster, LiveProgress(console, enabled=not quiet) as progress:
        runner = StudyRunner(exp, exp_text, cluster, study_name=name, keep_best=keep_best,
                             on_event=progress, **runner_options)
        res = runner.run(resume=resume)
    custom = exp.results_dir if exp.results_dir != f"results/{exp.name}" else None
    print_result(console, res, custom)  # the `next:` hint names a custom results folder
    return res


@click.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--study", help="Study name (default: <experiment name>-<UTC timestamp>).")
@click.option("--trials", type=click.IntRange(min=1), help="Override budget.trials.")
@click.option("--keep-best", is_flag=True,
              help="Leave the canary on the best trial's settings (re-applied and verified) "
                   "instead of the baseline.")
@click.option("--results", help="Override results_dir (Optuna/MLflow stores, journal).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--accept-findings", is_flag=True,
              help="Tune even when the fabric checks find a cause tuning cannot fix (an ECMP "
                   "collision); the findings are stored with the study.")
@handle_errors
def command(experiment: Path, study: str | None, trials: int | None, keep_best: bool,
            results: str | None, no_mlflow: bool, quiet: bool, accept_findings: bool) -> None:
    """Tune ECN/DCQCN on the canary described by EXPERIMENT (a YAML experiment file).

    Before anything changes, the fabric checks of `ecntune diagnose` run; a dominant finding
    (an ECMP collision) stops the run with exit 3 unless --accept-findings.
    Trial 0 measures the canary as it is (the baseline); every later trial is proposed by
    Optuna, checked against the static safety limits, applied, verified, measured and judged,
    and the canary is restored after it. Ctrl-C or SIGTERM restores the baseline and exits 130;
    `ecntune resume` continues the study. Exit codes: see `ecntune --help`.
    """
    from tuner.input_checks import read_text_file

    text = read_text_file(experiment, "experiment file")
    execute(text, str(experiment), study=study, resume=False, trials=trials,
            keep_best=keep_best, results=results, no_mlflow=no_mlflow, quiet=quiet,
            accept_findings=accept_findings)
