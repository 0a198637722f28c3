"""The results-folder lock (``safety.lock``) with real processes: a second holder is refused
with the first one's pid, and the kernel frees the lock of a SIGKILLed holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from safety.lock import CanaryBusy, hold

HOLDER = """
import sys, time
from safety.lock import hold
with hold(sys.argv[1], "run"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_second_holder_refused_then_free_after_sigkill(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with pytest.raises(CanaryBusy, match=rf"in use by another ecntune process "
                                             rf"\(`ecntune run` pid {proc.pid} on "):
            with hold(tmp_path, "recover"):
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    with hold(tmp_path, "recover") as path:  # no stale lock to clean up
        assert path.read_text().startswith(f'{{"pid": {os.getpid()}')


def test_same_process_twice_is_refused_too(tmp_path: Path) -> None:
    with hold(tmp_path / "r", "run"):
        with pytest.raises(CanaryBusy):
            with hold(tmp_path / "r", "resume"):
                pass
    with hold(tmp_path / "r", "run"):
        pass
