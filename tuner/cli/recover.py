"""``ecntune recover``: bring the canary back to its baseline after a crash.

Reads the change journals: ``<results>/journal.jsonl`` and every slice's
``<results>/slices/<name>/journal.jsonl`` (a scale-out worker's; with no argument, those of every
study folder under ``results/``), so no form of the command passes over a slice. Every change
without a closing outcome (the tuner died between
``begin`` and ``restored``) has its baseline re-applied, read back and compared
(``safety.rollback.restore``), then the entry is closed as ``restored:recover``. A record that
cannot be read (torn by a full disk, a size limit, power loss) means a change is *possibly*
open: the last baseline the journal recorded is restored the same way and the line is
acknowledged. The cluster is built from EXPERIMENT, or from the experiment stored with the
study in the Optuna storage when EXPERIMENT is not given. The results folder is locked
(``safety.lock``) so a recover never runs underneath a live tuner.

A journal record's CRC proves it whole, not that ecntune wrote it: before anything is applied,
each record's baseline must be the snapshot its study recorded in the Optuna storage before its
first change (``study_store.snapshot``). A mismatch is refused; a record whose study the storage
does not hold (a lost store) is applied only with ``--trust-journal``.
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
                entry: JournalEntry, slice_name: str | None = None) -> Experiment:
    """The experiment that wrote ``entry``: the file, else the one stored with its study in
    ``<results>/optuna.db``; ``results`` is the study's results_dir, and a slice's canary and
    folder are derived from it (tuner/slices.py)."""
    from tuner.errors import ConfigError
    from tuner.experiment import load_experiment, parse_experiment
    from tuner.study import load_for_resume

    if experiment is not None:
        exp = load_experiment(experiment, i_know=True)  # limits do not govern a restore
    else:
        storage = f"sqlite:///{Path(results or 'results') / 'optuna.db'}"
        try:
            name, text = load_for_resume(storage, entry.study)
        except ConfigError as exc:
            where = f" --slice {slice_name}" if slice_name else ""
            raise ConfigError(f"{exc}; pass the experiment file that ran study {entry.study} "
                              f"(ecntune recover EXPERIMENT{where})") from None
        exp = parse_experiment(text, f"<experiment stored with study {name}>", i_know=True)
    if results is not None:
        exp = exp.model_copy(update={"results_dir": results})
    if slice_name is not None:
        from tuner.slices import for_slice

        exp = for_slice(exp, slice_name)
    return exp


def check_baseline(entry: JournalEntry, exp: Experiment, slice_name: str | None,
                   trust_journal: bool) -> str | None:
    """Raise ``RollbackError`` unless ``entry``'s baseline is the snapshot its study recorded;
    returns a warning when there is no snapshot to check and ``trust_journal`` lets it pass."""
    from tuner import optuna_io, storage_url, study_store
    from tuner.errors import ConfigError, RollbackError

    where = f"study {entry.study!r} in {storage_url.hide(exp.storage_url)}"
    recorded = None
    db = exp.storage_url.removeprefix("sqlite:///")
    if db == exp.storage_url or Path(db).is_file():  # never create an empty store here
        try:
            recorded = study_store.snapshot(optuna_io.load_study(entry.study, exp.storage_url),
                                            slice_name)
        except ConfigError:
            pass
    head = f"journal entry {entry.id} (study {entry.study}, trial {entry.trial})"
    if recorded is None:
        if trust_journal:
            return (f"{head}: no baseline snapshot of {where} to check it against; applying "
                    "the journal's (--trust-journal)")
        raise RollbackError(
            f"{head}: no baseline snapshot of {where} to check its baseline against, so "
            "nothing was applied. If the study's store is lost and the journal is this "
            "tuner's own, run recover again with --trust-journal")
    if entry.baseline != recorded:
        diffs = "; ".join(f"{k}: journal {a}, study {b}" for k, (a, b) in
                          list(entry.baseline.diff(recorded).items())[:5])
        raise RollbackError(
            f"{head}: its baseline is not the snapshot {where} recorded before its first "
            f"change ({diffs}); nothing was applied. The journal was written by something "
            "else or altered: check it and the canary by hand")
    return None


def recover(journal_path: Path, experiment: Path | None, results: str | None,
            echo: Callable[[str], None] = click.echo, discard_unreadable: bool = False,
            slice_name: str | None = None, trust_journal: bool = False) -> int:
    """Restore every open change; returns how many were closed (raises on failure)."""
    from safety.journal import Journal
    from safety.rollback import restore
    from tuner.cluster import build_cluster
    from tuner.errors import RollbackError

    journal = Journal(journal_path)
    scan = journal.scan()
    open_entries = [e for e in scan.entries if not e.closed]
    for b in scan.bad:
        echo(f"journal {journal_path} line {b.line}: {b.reason}: a change is possibly open")
    if not open_entries and not scan.bad:
        echo(f"journal {journal_path}: no open change; the canary is on a known state")
        return 0
    if scan.bad and not open_entries and discard_unreadable:
        for b in scan.bad:
            journal.acknowledge(b.line)
        echo(f"journal {journal_path}: {len(scan.bad)} unreadable line(s) acknowledged "
             "without a restore (--discard-unreadable)")
        return 0
    todo = list(open_entries)
    if scan.bad and not open_entries:
        if not scan.entries:
            raise RollbackError(
                f"journal {journal_path}: no readable change records a baseline to restore. "
                "Check the canary by hand, then run `ecntune recover --results "
                f"{journal_path.parent} --discard-unreadable`")
        todo = [scan.entries[-1]]  # the last state the journal recorded
        echo(f"restoring the last recorded state (study {todo[0].study}, trial "
             f"{todo[0].trial}: {'its kept settings' if todo[0].kept else 'its baseline'})")
    exp = _experiment(experiment, results, todo[0], slice_name)
    for entry in todo:  # every record checked before the first write
        warning = check_baseline(entry, exp, slice_name, trust_journal)
        if warning:
            echo(warning)
    source = str(experiment) if experiment is not None else (
        f"<experiment stored with study {todo[0].study}>")
    with build_cluster(exp, source) as cluster:
        desc = cluster.describe()
        mine = set(desc.canary_switches) | set(desc.canary_nics)
        take_over = getattr(cluster, "take_over_locks", None)
        if take_over is not None:  # remote target locks a dead tuner left behind
            for line in take_over():
                echo(line)
        for entry in todo:
            outside = sorted(set(entry.targets) - mine)
            if outside:
                raise RollbackError(
                    f"journal entry {entry.id} (study {entry.study}, trial {entry.trial}) "
                    f"changed {outside}, which the experiment's canary does not contain; "
                    "pass the experiment file that ran it")
            # A kept change's last known state is its settings (a winner left on the canary),
            # every other change's its baseline.
            want = entry.settings if entry.kept else entry.baseline
            before = cluster.read_back()
            dirty = before.diff(want)
            targets = sorted({k.split(".", 1)[0] for k in dirty})
            report = restore(cluster, want)
            if not entry.closed:
                journal.end(entry.id, "restored:recover")
            what = "kept settings" if entry.kept else "baseline"
            echo(f"study {entry.study} trial {entry.trial}: "
                 + (f"{len(targets)} target(s) were off the {what} ({', '.join(targets)}); "
                    if targets else f"no target was off the {what}; ")
                 + f"{what} restored and verified by read-back in {report.seconds:.2f} s "
                 f"({report.attempts} attempt(s))")
            for key, (have, wanted) in list(dirty.items())[:20]:
                echo(f"  {key}: {have} -> {wanted}")
        for b in scan.bad:
            journal.acknowledge(b.line)
    return len(todo) + len(scan.bad)


def find_journals(root: Path = Path("results")) -> list[tuple[Path, str | None, Path]]:
    """Every journal under ``root``: ``results/*/journal.jsonl`` (and a legacy
    ``results/journal.jsonl``) and every slice's, ``results/*/slices/*/journal.jsonl``, as
    (journal, slice or None, the study's results_dir), sorted."""
    folders = sorted({p.parent for p in root.glob("*/journal.jsonl")}
                     | {p.parent.parent.parent for p in root.glob("*/slices/*/journal.jsonl")})
    if (root / "journal.jsonl").is_file() or (root / "slices").is_dir():
        folders.insert(0, root)
    return [j for f in folders for j in study_journals(f)]


def study_journals(folder: Path) -> list[tuple[Path, str | None, Path]]:
    """A study folder's journal and each of its slices' (``<folder>/slices/<name>/``)."""
    return [(folder / "journal.jsonl", None, folder),
            *((p, p.parent.name, folder)
              for p in sorted((folder / "slices").glob("*/journal.jsonl")))]


@click.command("recover")
@click.argument("experiment", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--results", help="the study's results_dir, holding journal.jsonl and slices/ "
                                "(default: the experiment's, else every folder under results/).")
@click.option("--discard-unreadable", is_flag=True,
              help="Acknowledge unreadable journal lines without restoring (only when the "
                   "journal records no baseline and the canary was checked by hand).")
@click.option("--slice", "slice_name",
              help="A slice of a shared study (canary.slices; docs/scale-out.md): its journal "
                   "<results_dir>/slices/<slice>/ and its canary. Needs EXPERIMENT.")
@click.option("--trust-journal", is_flag=True,
              help="Apply an open record's baseline although its study's store (and the "
                   "baseline snapshot recorded there) is gone. A record whose baseline differs "
                   "from its study's snapshot is refused all the same.")
@handle_errors
def command(experiment: Path | None, results: str | None, discard_unreadable: bool,
            slice_name: str | None, trust_journal: bool) -> None:
    """Restore the canary's baseline if the journal shows a change that was never closed.

    Run it after the tuner was killed (SIGKILL, power loss, lost session). Every target of the
    open change gets the journal's baseline snapshot, is read back and compared; exit 0 when the
    canary is verified on its baseline, 4 when it could not be restored. An unreadable journal
    record counts as an open change. Every slice's journal under the results folder is checked
    too; with no argument, every study folder under results/.
    """
    from safety.lock import hold
    from tuner.errors import ConfigError
    from tuner.experiment import load_experiment

    if slice_name is not None and experiment is None:
        raise ConfigError(f"--slice {slice_name}: pass the experiment file that declares the "
                          "slices")
    folder = results if results is not None else (
        load_experiment(experiment, i_know=True).results_dir if experiment is not None
        else None)
    journals: list[tuple[Path, str | None, Path]]
    if slice_name is not None:
        assert folder is not None
        journals = [(Path(folder) / "slices" / slice_name / "journal.jsonl", slice_name,
                     Path(folder))]
    elif folder is not None:  # the study's journal and every slice's: a slice is not skipped
        journals = study_journals(Path(folder))
    else:
        journals = find_journals()
        if not journals:
            raise ConfigError(f"no journal found: looked for results/*/journal.jsonl and "
                              f"results/*/slices/*/journal.jsonl under {Path.cwd()}; pass "
                              "--results DIR or the experiment file")
        click.echo("found " + ", ".join(str(j) for j, _, _ in journals if j.is_file()))
    for path, name, study_folder in journals:
        if not path.is_file():
            if name is None:
                click.echo(f"journal {path} does not exist: no change was ever recorded there")
            continue
        with hold(path.parent, "recover"):  # never underneath a live tuner
            recover(path, experiment, str(study_folder),
                    discard_unreadable=discard_unreadable, slice_name=name,
                    trust_journal=trust_journal)
