"""A real ``mlflow server`` for tests: started on a backend store URI, waited for, stopped.

The way a team runs one for many clients: ``--workers 1``, job execution off
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``: no job runner process), artifacts proxied to a
local folder, a free port on 127.0.0.1. Used by tests/review (SQLite store) and tests/scaleout
(PostgreSQL store).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    t0: float  # time.monotonic() at launch
    start_s: float = 0.0  # launch to first good /health

    def get(self, endpoint: str, **params: str) -> Any:
        """GET a REST endpoint, JSON-decoded."""
        return json.loads(self.raw(endpoint, **params))

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(f"{self.url}{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def raw(self, endpoint: str, **params: str) -> bytes:
        from urllib.parse import urlencode

        q = f"?{urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{endpoint}{q}", timeout=30) as r:
            return bytes(r.read())

    def wait_up(self, timeout_s: float = 180) -> Server:
        """Block until ``/health`` answers 200 (``timeout_s`` from launch); RuntimeError with
        the log's tail if the server exits or never comes up."""
        while self.start_s == 0.0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s = time.monotonic() - self.t0
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() - self.t0 > timeout_s:
                raise RuntimeError(f"mlflow server not up after {timeout_s} s:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.25)
        return self

    def stop(self) -> None:
        """SIGTERM its whole process group (the CLI runs the app in a child), then SIGKILL."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start(backend_uri: str, home: Path) -> Server:
    """Launch ``mlflow server`` on ``backend_uri`` (its log and artifacts in ``home``) and
    return at once; ``wait_up`` before use, ``stop`` after."""
    port = free_port()
    log = home / "server.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
           "--artifacts-destination", str(home / "mlartifacts"), "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return Server(url=f"http://127.0.0.1:{port}", proc=proc, log=log, t0=time.monotonic())


@contextmanager
def mlflow_server(backend_uri: str, home: Path, timeout_s: float = 180) -> Iterator[Server]:
    """``mlflow server`` on ``backend_uri``, up for the ``with`` block, then stopped."""
    server = start(backend_uri, home)
    try:
        yield server.wait_up(timeout_s)
    finally:
        server.stop()
