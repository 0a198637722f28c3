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
