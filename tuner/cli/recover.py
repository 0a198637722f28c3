"""``ecntune recover``: bring the canary back to its baseline after a crash.

Reads the change journal (``<results>/journal.jsonl``); every change without a closing outcome
(the tuner died between ``begin`` and ``restored``) has its baseline re-applied, read back and
compared (``safety.rollback.restore``), then the entry is closed as ``restored:recover``. The
cluster is built from EXPERIMENT, or from the experiment stored with the study in the Optuna
storage when EXPERIMENT is not given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuner.cli import handle_errors

if TYPE_CHECKING:
    from safety.journal import JournalEntry
    from tuner.experiment import Experiment


def _experiment(experiment: Path | None, results: str | None,
                entry: JournalEntry) -> Experiment:
    from tuner.experiment import load_experiment, parse_experiment
    from tuner.study import load_for_resume

    if experiment is not None:
        exp = load_experiment(experiment)
    else:
        storage = f"sqlite:///{Path(results or 'results') / 'optuna.db'}"
        name, text = load_for_resume(storage, entry.study)
        exp = parse_experiment(text, f"<experiment stored with study {name}>")
    if results is not None:
        exp = exp.model_copy(update={"results_dir": results})
    return exp


def recover(journal_path: Path, experiment: Path | None, results: str | None,
            echo: Callable[[str], None] = click.echo) -> int:
    """Restore every open change; returns how many were closed (raises on failure)."""
    from safety.journal import Journal
    from safety.rollback import restore
    from tuner.cluster import build_cluster
    from tuner.errors import RollbackError

    journal = Journal(journal_path)
    open_entries = [e for e in journal.entries() if not e.closed]
    if not open_entries:
        echo(f"journal {journal_path}: no open change; the canary is on a known state")
        return 0
    first = open_entries[0]
    exp = _experiment(experiment, results, first)
    with build_cluster(exp) as cluster:
        desc = cluster.describe()
        mine = set(desc.canary_switches) | set(desc.canary_nics)
        for entry in open_entries:
            outside = sorted(set(entry.targets) - mine)
            if outside:
                raise RollbackError(
                    f"journal entry {entry.id} (study {entry.study}, trial {entry.trial}) "
                    f"changed {outside}, which the experiment's canary does not contain; "
                    "pass the experiment file that ran it")
            before = cluster.read_back()
            dirty = before.diff(entry.baseline)
            targets = sorted({k.split(".", 1)[0] for k in dirty})
            report = restore(cluster, entry.baseline)
            journal.end(entry.id, "restored:recover")
            echo(f"study {entry.study} trial {entry.trial}: "
                 + (f"{len(targets)} target(s) were off the baseline ({', '.join(targets)}); "
                    if targets else "no target was off the baseline; ")
                 + f"baseline restored and verified by read-back in {report.seconds:.2f} s "
                 f"({report.attempts} attempt(s))")
            for key, (have, want) in list(dirty.items())[:20]:
                echo(f"  {key}: {have} -> {want}")
    return len(open_entries)


@click.command("recover")
@click.argument("experiment", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--results", help="results_dir holding journal.jsonl (default: the experiment's "
                                "results_dir, else ./results).")
@handle_errors
def command(experiment: Path | None, results: str | None) -> None:
    """Restore the canary's baseline if the journal shows a change that was never closed.

    Run it after the tuner was killed (SIGKILL, power loss, lost session). Every target of the
    open change gets the journal's baseline snapshot, is read back and compared; exit 0 when the
    canary is verified on its baseline, 4 when it could not be restored.
    """
    from tuner.experiment import load_experiment

    folder = results
    if folder is None and experiment is not None:
        folder = load_experiment(experiment).results_dir
    path = Path(folder or "results") / "journal.jsonl"
    recover(path, experiment, results if results is not None else folder)
