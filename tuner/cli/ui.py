"""``ecntune ui``: the MLflow UI on the tool's store (and optuna-dashboard when installed).

Binds to 127.0.0.1 unless ``--host`` says otherwise: the UI has no authentication. The
printed address opens the study's experiment in the runs table (MLflow 3 opens experiments
in its GenAI view otherwise, which is empty for ecntune), where each study is a parent run
with its trials nested under it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from tuner.cli import handle_errors

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def runs_url(base: str, experiment_id: str | None, flat: bool = False) -> str:
    """The runs table of an experiment in the MLflow 3 UI: studies with their trials nested
    (collapsed) under them, or with ``flat`` every run sorted by name (the UI only nests
    children when sorting by date), so each ``trial-NNNN`` is a row."""
    if experiment_id is None:
        return f"{base}/#/experiments"
    url = f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    return url + ("&orderByKey=attributes.run_name&orderByAsc=true" if flat else "")


def port_free(host: str, port: int) -> bool:
    """Nothing listens on ``host:port`` (SO_REUSEADDR, as servers bind: a closed connection in
    TIME_WAIT does not count)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_store(target: str | None, results: str, uri: str | None) -> tuple[str, str | None]:
    """(tracking URI, study name or None) from what the user typed: a study name, a results
    folder, or nothing (the most recently written store under ``results``)."""
    from tuner.errors import ConfigError
    from tuner.history import History, stores

    if uri:
        return uri, target
    if target is not None and Path(target).is_dir():
        found = stores(target)
        if not found:
            raise ConfigError(f"{target}: no mlflow.db in this results folder")
        return found[0], None
    found = stores(results)
    if not found:
        raise ConfigError(f"{results}: no mlflow.db here or in its sub-folders; run "
                          "`ecntune run EXPERIMENT` first or pass --tracking-uri")
    if target is None:
        newest = max(found, key=lambda u: Path(u.removeprefix("sqlite:///")).stat().st_mtime)
        return newest, None
    for u in found:
        if History([u]).studies_named(target):
            return u, target
    raise ConfigError(f"study {target!r} not found in {', '.join(found)}")


def _wait_up(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    from tuner.errors import TunerError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TunerError(f"{url}: server exited with {proc.returncode}:\n"
                             f"{log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    raise TunerError(f"{url}: not up after {timeout_s:g} s; log {log}")


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _study_info(uri: str, study: str | None) -> tuple[str | None, str | None]:
    """(experiment id, Optuna storage URL) of ``study`` or of the newest study in ``uri``."""
    from tuner.history import History

    h = History([uri])
    rows = h.studies_named(study) if study else h.studies()
    if not rows:
        return None, None
    storage = rows[0].storage or None
    if storage and storage.startswith("sqlite:///") and uri.startswith("sqlite:///"):
        here = Path(storage.removeprefix("sqlite:///"))
        beside = Path(uri.removeprefix("sqlite:///")).parent / "optuna.db"
        if not here.is_file() and beside.is_file():  # a relative path from another cwd
            storage = f"sqlite:///{beside}"
    return rows[0].experiment_id, storage


@click.command("ui")
@click.argument("target", metavar="[STUDY|RESULTS_DIR]", required=False)
@click.option("--results", default="results", show_default=True,
              help="Results folder whose mlflow.db (or <dir>/*/mlflow.db) to serve.")
@click.option("--tracking-uri", help="Serve this MLflow backend store instead.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback exposes an unauthenticated UI.")
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
@click.option("--dashboard-port", type=click.IntRange(1, 65535), default=8080,
              show_default=True, help="optuna-dashboard port (when it is installed).")
@click.option("--no-dashboard", is_flag=True, help="Do not start optuna-dashboard.")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the servers' logs (default: next to the store).")
@handle_errors
def command(target: str | None, results: str, tracking_uri: str | None, host: str, port: int,
            dashboard_port: int, no_dashboard: bool, logs: Path | None) -> None:
    """Start `mlflow server` on the ecntune MLflow store and print the address of the study's
    runs table (parent run per study, nested trial runs with their artifacts). TARGET is a
    study name or a results folder (default: the most recent store under --results).
    optuna-dashboard is started on the study's Optuna storage when it is installed. Stops
    both on Ctrl-C or SIGTERM."""
    from tuner.errors import ConfigError

    uri, study = pick_store(target, results, tracking_uri)
    if uri.startswith(("http://", "https://")):
        exp_id, _ = _study_info(uri, study)
        click.echo(f"MLflow UI: {runs_url(uri.rstrip('/'), exp_id)}  (already running)")
        return
    if not port_free(host, port):
        raise ConfigError(f"--port {port}: already in use on {host}; pick another --port")
    exp_id, storage = _study_info(uri, study)
    home = logs or (Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///")
                    else Path("."))
    env = {**os.environ}
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    if host not in LOOPBACK:
        click.echo(f"warning: binding to {host}: the MLflow UI has no authentication", err=True)
    procs: list[subprocess.Popen[bytes]] = []
    shown = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
    base = f"http://{shown}:{port}"
    # SIGINT too: a shell starting us in the background leaves it ignored
    previous = {sig: signal.signal(sig, _raise_interrupt)
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        procs.append(_start([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             uri, "--host", host, "--port", str(port), "--workers", "1"],
                            home / "mlflow-ui.log", env))
        dash = shutil.which("optuna-dashboard")
        if no_dashboard:
            dash_msg = "optuna-dashboard: not started (--no-dashboard)"
        elif dash is None:
            dash_msg = ("optuna-dashboard: not installed (pip install optuna-dashboard to "
                        "browse the Optuna study too)")
        elif storage is None:
            dash_msg = "optuna-dashboard: no Optuna storage recorded for this study"
        elif not port_free(host, dashboard_port):
            dash_msg = f"optuna-dashboard: --dashboard-port {dashboard_port} in use; skipped"
        else:
            procs.append(_start([dash, storage, "--host", host, "--port",
                                 str(dashboard_port)], home / "optuna-dashboard.log", env))
            dash_msg = f"Optuna dashboard: http://{shown}:{dashboard_port}/"
        _wait_up(f"{base}/health", procs[0], home / "mlflow-ui.log", 90)
        click.echo(f"MLflow store: {uri}")
        click.echo(f"MLflow UI: {runs_url(base, exp_id)}")
        if exp_id is not None:
            click.echo(f"  every trial as a row: {runs_url(base, exp_id, flat=True)}")
        click.echo(dash_msg)
        click.echo("Ctrl-C stops the server(s).", nl=True)
        sys.stdout.flush()
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        raise ConfigError(f"a server exited on its own; see the logs in {home}")
    except KeyboardInterrupt:
        click.echo("stopping")
    finally:
        _stop(procs)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
