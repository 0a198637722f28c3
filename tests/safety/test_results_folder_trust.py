"""Red team H2: the results folder is trusted by ``recover`` and written by a tuner that may
run as root, so a folder another account can write is refused, a planted symlink is never
written through, and the state file's temporary name cannot be guessed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safety.journal import Journal
from safety.lock import LOCK_NAME, hold
from tuner.cluster.statefile import write_state
from tuner.errors import ConfigError, TunerError
from tuner.settings import Settings


def test_a_folder_others_can_write_is_refused_naming_it(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match=rf"{shared}: .*mode 777: another account can write"):
        with hold(shared / "results", "run"):
            pass
    assert not (shared / "results").exists() or not (shared / "results" / LOCK_NAME).exists()
    os.chmod(shared, 0o1777)  # sticky, like /tmp: others cannot replace what is ours there
    with hold(shared / "results", "run") as lock:
        assert lock.is_file()
    assert oct((shared / "results").stat().st_mode & 0o777) == oct(0o755)  # whatever the umask


def test_a_planted_lock_or_journal_symlink_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / LOCK_NAME).symlink_to(victim)
    with pytest.raises(TunerError, match="cannot create the lock file"):
        with hold(results, "run"):
            pass
    (results / "journal.jsonl").symlink_to(victim)
    with pytest.raises(TunerError, match="cannot write"):
        Journal(results / "journal.jsonl")._append({"kind": "note"})
    assert victim.read_text() == "precious\n"


def test_the_state_files_temporary_name_is_unpredictable(tmp_path: Path) -> None:
    state = tmp_path / "sim-state.json"
    # The name the old code used: a symlink planted there must not be written through.
    planted = tmp_path / f".{state.name}.{os.getpid()}.tmp"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted.symlink_to(victim)
    write_state(state, Settings())
    assert victim.read_text() == "precious\n" and state.is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [planted.name]


def test_a_file_another_account_left_in_the_folder_is_refused(tmp_path: Path) -> None:
    """The folder was open to others, and the message above said `chmod go-w`: a journal
    another account planted before that stays, and `recover` restored its forged baseline
    ("baseline restored and verified"). A file in the folder not owned by this account (or
    root), or writable by anyone, is refused, named, before anything reads it."""
    from tuner.settings import Settings

    results = tmp_path / "results"
    results.mkdir(mode=0o777)
    os.chmod(results, 0o777)
    journal = results / "journal.jsonl"
    forged = Settings.model_validate({"switches": {"leaf0": {"kmin_bytes": 1000,
                                                             "kmax_bytes": 2000}}})
    Journal(journal).begin("s", 99, forged.targets(), forged, forged)  # a valid CRC
    os.chown(journal, 65534, 65534)  # nobody's
    os.chmod(results, 0o755)  # what the message told the operator to do
    with pytest.raises(ConfigError, match=rf"{journal}: owned by uid 65534"):
        with hold(results, "recover"):
            pass
    os.chown(journal, os.geteuid(), os.getegid())
    os.chmod(journal, 0o666)
    with pytest.raises(ConfigError, match=rf"{journal}: owned by uid \d+, mode 666"):
        with hold(results, "recover"):
            pass
    os.chmod(journal, 0o600)
    with hold(results, "recover") as lock:  # ours again: accepted
        assert lock.is_file()


def test_what_diagnose_export_and_watch_write_replaces_a_planted_symlink(
        tmp_path: Path) -> None:
    """The red team's H2 follow-up: ``diagnose`` wrote ``diagnosis.json`` through a symlink
    planted in a folder others could write. Every file the commands write there now goes to a
    new file that is renamed over the path (``safety.files.write_file``): the symlink is
    replaced, what it pointed at is untouched."""
    from tuner.diagnose.finding import Diagnosis
    from tuner.diagnose.run import save
    from tuner.experiment import parse_experiment
    from tuner.lifecycle.change_request import ChangeRequest, write
    from tuner.lifecycle.profile import write_textfile
    from tuner.settings import KNOBS

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "results"
    out.mkdir()
    names = ["diagnosis.json", "change-request.md", "change-request.html", "watch.prom"]
    for name in names:
        (out / name).symlink_to(victim)
    exp = parse_experiment(f"name: t\nresults_dir: {out}\ntracking: {{enabled: false}}\n"
                           "workload: {parts: [{kind: collective, op: alltoall, "
                           "size_bytes: 65536}]}\n")
    save(exp, Diagnosis(backend="sim"))
    base = {k: knob.default for k, knob in KNOBS.items()}
    write(ChangeRequest(study="s", experiment="t", values={**base, "kmin_bytes": 20_000},
                        baseline=base, switches=["leaf0"], nics=["host0/mlx5_0"]), out)
    write_textfile(out / "watch.prom", "ecntune_watch_retune_advised 0\n")
    assert victim.read_text() == "precious\n"
    for name in names:
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert '"backend": "sim"' in (out / "diagnosis.json").read_text()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary left
