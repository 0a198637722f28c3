"""``ecntune worker EXPERIMENT --slice NAME``: run trials of a shared study on one slice.

Start one per slice, on any machines that reach the study's storage (``storage:
postgresql://...``) and MLflow (``tracking.uri``); see docs/scale-out.md. The first worker
creates the study (named ``--study``, default the experiment's name); the others join it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from tuner.cli import handle_errors
from tuner.errors import TunerError


class SliceBusy(TunerError):
    """Another live worker holds the slice's lease."""


def _line(slice_name: str) -> Any:
    """Progress as one plain line per event (workers' logs are read side by side)."""

    def event(kind: str, data: dict[str, Any]) -> None:
        if kind == "trial":
            o, best = data["outcome"], data.get("best")
            score = "" if o.score is None else f" score {o.score:.4f}"
            top = "" if best is None or best.score is None else (
                f" (study best {best.score:.4f}, trial {best.number})")
            click.echo(f"[{slice_name}] trial {o.number}: {o.verdict}{score}{top}")
        elif kind == "start":
            click.echo(f"[{slice_name}] study {data['study']}: {data['done']} of "
                       f"{data['total']} trials done by all workers")
        elif kind == "worker_died":
            click.echo(f"[{slice_name}] trial {data['trial']}: its worker died; failed and "
                       "re-queued with the same params")
        elif kind == "slice_restored":
            click.echo(f"[{slice_name}] open change of trial {data['trial']} found: slice "
                       f"restored to its baseline and verified in {data['seconds']:.2f} s")

    return event


@click.command("worker")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--slice", "slice_name", required=True,
              help="The slice this worker tunes (canary.slices of EXPERIMENT).")
@click.option("--study", help="Shared study name (default: the experiment's name).")
@click.option("--trials", type=click.IntRange(min=1),
              help="Override budget.trials (the study's total over all workers).")
@click.option("--lease-ttl", type=click.FloatRange(min=1.0), default=30.0, show_default=True,
              help="Seconds a dead worker keeps its slice (renewed every third of it).")
@click.option("--wait-lease", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="Wait up to this many seconds for a held slice (a restarted worker waits "
                   "out its dead predecessor's lease).")
@click.option("--results", help="Override results_dir (the slice's folder is "
                                "<results_dir>/slices/<slice>).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@handle_errors
def command(experiment: Path, slice_name: str, study: str | None, trials: int | None,
            lease_ttl: float, wait_lease: float, results: str | None, no_mlflow: bool) -> None:
    """Run trials of the study shared by all workers of EXPERIMENT on slice --slice only.

    The slice is leased in the study's database for the worker's life (no two workers ever
    hold one slice; a dead worker's lease expires after --lease-ttl) and restored after every
    trial. A trial whose worker died is failed and re-queued by the others. Exit 0 when the
    shared budget is spent; 3 when the slice is held by another worker or the lease was lost
    (slice restored); other codes as `ecntune --help`.
    """
    from safety.lock import hold
    from tuner import optuna_io, study_store
    from tuner.cli.run import overridden
    from tuner.experiment import check_name, parse_experiment
    from tuner.input_checks import check_inputs, read_text_file
    from tuner.lease import LeaseKeeper, SliceLeases
    from tuner.slices import for_slice
    from tuner.tracking import redact
    from tuner.worker import LeaseLost, warm_up

    text = read_text_file(experiment, "experiment file")
    source = str(experiment)
    exp = overridden(parse_experiment(text, source), trials=trials, results=results,
                     no_mlflow=no_mlflow)
    check_inputs(exp, source)
    name = check_name(study, "--study") if study is not None else exp.name
    mine = for_slice(exp, slice_name)
    optuna_io.ensure_storage_dir(mine.storage_url)
    warm_up(mine)
    leases = SliceLeases(mine.storage_url, name, ttl_s=lease_ttl)
    try:
        lease = leases.acquire(slice_name)
        deadline = time.monotonic() + wait_lease
        while lease is None and time.monotonic() < deadline:
            time.sleep(min(1.0, lease_ttl / 10))
            lease = leases.acquire(slice_name)
        if lease is None:
            held = next((r for r in leases.rows() if r.slice == slice_name), None)
            who = f" by {held.holder}" if held else ""
            raise SliceBusy(f"slice {slice_name} of study {name} is held{who}; start this "
                            "worker on another slice, or wait for that lease to expire")
        if lease.taken_from:
            click.echo(f"[{slice_name}] lease taken over from {lease.taken_from}, which "
                       "stopped renewing it")
        try:
            with LeaseKeeper(leases, lease) as keeper, hold(mine.results_path, "worker"):
                res, worker = _run(mine, redact(text), source, name, slice_name, keeper)
        except LeaseLost as exc:
            raise WorkerStopped(str(exc)) from None
        finally:
            leases.release(lease)
    finally:
        leases.close()
    own = sum(1 for t in optuna_io.trials(worker.study)
              if study_store.tags(t).slice == slice_name and t.state.name != "RUNNING")
    click.echo(f"[{slice_name}] done: {own} trials on this slice, {len(res.trials)} in the "
               f"study; MLflow parent run {res.parent_run_id or '-'}")


def _run(exp: Any, text: str, source: str, study: str, slice_name: str, keeper: Any
         ) -> tuple[Any, Any]:
    from rich.console import Console

    from tuner.cli.preflight import gate
    from tuner.cluster import build_cluster
    from tuner.worker import SliceWorker

    cluster = build_cluster(exp, source)
    try:  # pre-flight: a failed check stops the worker before any change
        gate(exp, cluster, Console(), source=source)
    except BaseException:
        cluster.close()
        raise
    with cluster:
        worker = SliceWorker(exp, text, cluster, study_name=study, slice_name=slice_name,
                             keeper=keeper, on_event=_line(slice_name))
        return worker.run(), worker


class WorkerStopped(TunerError):
    """The worker stopped because its slice lease was lost (slice restored)."""
