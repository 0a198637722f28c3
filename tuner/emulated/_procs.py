"""Process plumbing of the emulated cluster: key generation and finding/killing what it started.

Everything is found through /proc (descendants of a listener, or the ``ECNTUNE_EMU_ROOT`` in a
process environment), so teardown never matches by name and never touches foreign processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

SSH_KEYGEN = "ssh-keygen"


def keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill(pid: int, sig: int) -> int:
    try:
        os.kill(pid, sig)
        return 1
    except (ProcessLookupError, PermissionError):
        return 0


def kill_all(pids: list[int]) -> list[int]:
    """SIGKILL ``pids``, stopping every one first; returns those signalled. Killed one by one,
    a shell whose child died first runs its next command before its own SIGKILL arrives
    (``sleep 20; echo never`` printed ``never`` on a loaded machine). A stopped shell cannot,
    and a non-interactive shell does not wait for stopped children."""
    for pid in pids:
        kill(pid, signal.SIGSTOP)
    return [pid for pid in pids if kill(pid, signal.SIGKILL)]


def is_sshd(pid: int) -> bool:
    try:
        return b"sshd" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat.rsplit(")", 1)[1].split()[0] == "Z":  # zombie of a parent we do not own
            return
        time.sleep(0.01)


def descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (per-connection sshd processes, shells, tools)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def pids_with_env(key: str, value: str, key2: str | None = None,
                   value2: str | None = None) -> list[int]:
    """Processes whose environment has ``key=value`` (and ``key2=value2``), except ourselves."""
    want = f"{key}={value}".encode()
    want2 = f"{key2}={value2}".encode() if key2 else None
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env and (want2 is None or want2 in env):
            out.append(int(d.name))
    return out
