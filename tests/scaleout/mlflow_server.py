"""Start ``mlflow server`` on a backend store URI (here PostgreSQL), the way a team would run
one for many workers: ``--workers 1`` and job execution off (see tests/review/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.review.conftest import free_port


@contextmanager
def mlflow_server(backend_uri: str, home: Path, timeout_s: float = 180) -> Iterator[str]:
    port = free_port()
    log = home / "server.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
           "--artifacts-destination", str(home / "mlartifacts"), "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not up after {timeout_s} s:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.25)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
