"""One tuner per canary: an exclusive ``flock`` on the results folder.

``run``, ``resume`` and ``recover`` hold it for their whole life; a second one on the same
folder is refused at once (``CanaryBusy``, exit 3) with the holder's pid, host, command and
start time, before it builds a backend or reads the canary. The kernel drops the lock when the
holder dies (even by SIGKILL), so a stale lock never needs cleaning up; the file itself stays.
Remote targets carry their own lock, taken with the dead-man arm (``safety.deadman``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuner.errors import ConfigError, TunerError

LOCK_NAME = "ecntune.lock"


class CanaryBusy(TunerError):
    """Another ecntune process holds the results folder (exit 3; nothing was touched)."""


def check_private(folder: Path) -> None:
    """Refuse a results folder another account could plant files in (``ConfigError``), as
    OpenSSH refuses a ``~/.ssh`` others can write: it and each parent up to the first parent
    this account owns must belong to this account (or root) and be writable by no one else,
    unless sticky (``/tmp``: others cannot replace what is ours there). Its lock, journal and state
    files are what ``recover`` trusts and what a tuner running as root writes through, so every
    entry in it must belong to this account (or root) and be writable by no other account."""
    me = os.geteuid()
    for d in (folder, *folder.parents):
        st = d.stat()
        sticky = st.st_mode & stat.S_ISVTX
        if st.st_uid not in (me, 0) or (st.st_mode & 0o022 and not sticky):
            raise ConfigError(
                f"{d}: owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}: another "
                f"account can write there, so it could plant the lock, journal or state files "
                f"of {folder} (a journal is what `recover` restores from). Use a folder only "
                f"this account can write (chmod go-w {d})")
        if d != folder and st.st_uid == me:  # ours, and safe: nothing above can swap it
            break
    # Its files too: one planted while the folder was open to others stays there after the
    # `chmod go-w` the message above asks for, and a forged journal is restored by `recover`.
    for f in folder.iterdir():
        st = f.lstat()
        if st.st_uid not in (me, 0) or (st.st_mode & 0o002 and not stat.S_ISLNK(st.st_mode)):
            raise ConfigError(
                f"{f}: owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}: another "
                f"account wrote it or can write it, and `recover` trusts the lock, journal and "
                f"state files of {folder}. Check what it holds, then remove it (or give it to "
                f"this account: chown, chmod o-w)")


@contextmanager
def hold(results: str | os.PathLike[str], command: str) -> Iterator[Path]:
    """Hold the exclusive lock of the results folder ``results`` while the block runs."""
    folder = Path(results).absolute()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: results_dir is a file, not a folder -- point results_dir "
                          "(or --results) at a folder")
    try:
        created = [d for d in (folder, *folder.parents) if not d.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        for d in created:  # ours, whatever the umask: writable by this account alone
            os.chmod(d, 0o755)
    except OSError as exc:
        raise CanaryBusy(f"{folder}: cannot create the results folder ({exc.strerror}); "
                         "check the path") from None
    check_private(folder)
    try:
        # O_NOFOLLOW: a symlink planted as the lock file is refused, never truncated through.
        fd = os.open(folder / LOCK_NAME,
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise CanaryBusy(f"{folder}: cannot create the lock file {LOCK_NAME} "
                         f"({exc.strerror}); check the results folder") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CanaryBusy(f"{folder} is in use by another ecntune process ({_holder(fd)}); "
                             "one tuner per canary: wait for it to finish or stop it "
                             "(Ctrl-C restores the canary)") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield folder / LOCK_NAME
    finally:
        os.close(fd)  # releases the flock


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        since = time.strftime("%H:%M:%S UTC", time.gmtime(float(info["since"])))
        return (f"`ecntune {info['command']}` pid {int(info['pid'])} on {info['host']}, "
                f"since {since}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "holder unknown"
