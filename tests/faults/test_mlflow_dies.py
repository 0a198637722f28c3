"""A real MLflow tracking server (``mlflow server``) is SIGKILLed in the middle of a study.

Without a circuit breaker every later trial paid the client's retries (~6 s each) and a 30-trial
study ran out of wall time at trial 22. With it, the first failure stops all MLflow calls for
the rest of the study: the study keeps its pace, every trial is in Optuna, and once the server
is back ``ecntune resume`` back-fills each missing trial exactly once.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.faults.conftest import ECNTUNE, finished_trials, sim_experiment, wait_until
from tests.faults.test_sim_crash import dirty_targets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
MLFLOW = str(Path(sys.executable).with_name("mlflow"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
         "--default-artifact-root", (store / "artifacts").as_uri(), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    if not wait_until(up, 180, 0.5):
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("mlflow server did not start within 180 s")
    return proc


def trial_runs(uri: str) -> list[tuple[int, str]]:
    """(trial, run status) of every nested trial run, sorted."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exps = [e for e in client.search_experiments() if e.name == "ecntune/faults"]
    if not exps:
        return []
    runs = client.search_runs([exps[0].experiment_id], max_results=1000)
    return sorted((int(r.data.tags["ecntune.trial"]), r.info.status) for r in runs
                  if "ecntune.trial" in r.data.tags)


def logged_trials(uri: str) -> list[int]:
    return [n for n, _ in trial_runs(uri)]


def completion_gaps(results: Path, kill: datetime.datetime) -> tuple[list[float], list[float]]:
    """Seconds between consecutive trials' ends (Optuna's ``datetime_complete``), for the
    trials that ended before ``kill`` and for those that started after it."""
    import optuna

    storage = f"sqlite:///{results / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage=storage)
    ts = sorted((t for t in optuna.load_study(study_name=summary.study_name,
                                              storage=storage).get_trials(deepcopy=False)
                 if t.datetime_complete is not None), key=lambda t: t.datetime_complete)
    before, after = [], []
    for prev, t in zip(ts, ts[1:], strict=False):
        gap = (t.datetime_complete - prev.datetime_complete).total_seconds()
        if t.datetime_complete < kill:
            before.append(gap)
        elif prev.datetime_complete >= kill:
            after.append(gap)
    return before, after


def test_mlflow_server_dies_mid_study(tmp_path: Path, reliability) -> None:
    trials = 12
    exp = sim_experiment(tmp_path, trials=trials, iterations=3)
    store, port = tmp_path / "mlflow-server", free_port()
    store.mkdir()
    uri = f"http://127.0.0.1:{port}"
    exp.write_text(exp.read_text().replace("tracking: {enabled: false}",
                                           f"tracking: {{enabled: true, uri: '{uri}'}}"))
    results = tmp_path / "results"
    server = start_server(store, port)
    t_start = time.monotonic()
    run = subprocess.Popen([*ECNTUNE, "run", str(exp), "--quiet"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(logged_trials(uri)) >= 3, 300, 0.5)
        t_kill = time.monotonic()
        kill_wall = datetime.datetime.now()
        before_s = t_kill - t_start
        done_at_kill = len(finished_trials(results))
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        out, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
    after_s = time.monotonic() - t_kill
    assert run.returncode == 0, err[-3000:]
    states = finished_trials(results)
    assert len(states) == trials + 1 and "RUNNING" not in states.values()
    after = len(states) - done_at_kill
    assert after >= 5, after  # enough trials ran against a dead server to tell
    # two MLflow attempts after the kill, whatever the trial count: the call that found it
    # dead (which opened the breaker) and the back-fill probe at the end; before the breaker
    # every later trial paid the client's retries (~6 s each)
    failures = [ln for ln in err.splitlines() if "MLflow " in ln and " failed (" in ln]
    assert len(failures) == 2, failures
    assert "no more MLflow calls until the end of the study" in failures[0]
    assert "back-fill" in failures[1]
    per_trial = after_s / after
    per_trial_before = before_s / max(1, done_at_kill)
    # The breaker's saving, trial by trial: the time between consecutive trials' ends (a
    # trial and the logging of the one before) after the kill against before it. Medians, so
    # that what each phase pays once (start-up and the baseline before; the call that found
    # the server dead, the confirmation and the end after) does not decide. Without the
    # breaker every trial after the kill would pay the client's retries on each of its calls
    # (~6 s a call), so the rule allows half of one call.
    before_gaps, after_gaps = completion_gaps(results, kill_wall)
    assert len(before_gaps) >= 2 and len(after_gaps) >= 4, (before_gaps, after_gaps)
    assert statistics.median(after_gaps) < statistics.median(before_gaps) + 3.0, (
        before_gaps, after_gaps)
    # the server is back: resume (budget already used) back-fills every missing trial once
    server = start_server(store, port)
    try:
        res = subprocess.run([*ECNTUNE, "resume", "--results", str(results), "--quiet"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        runs = trial_runs(uri)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    # one run per trial, each ended: a run the kill caught mid-log is completed in place
    logged = [n for n, _ in runs]
    assert logged == sorted(states), (logged, sorted(states))
    assert {s for _, s in runs} <= {"FINISHED", "FAILED"}, runs
    lost = len(set(states) - set(logged))
    reliability.record("MLflow tracking server SIGKILLed mid-study (real `mlflow server`)",
                       f"first failure opened the circuit breaker: no more MLflow calls, "
                       f"{after} trials ran on at {per_trial:.1f} s each after the kill "
                       f"({per_trial_before:.1f} s before it, MLflow logging included); "
                       "every trial in Optuna and back-filled exactly once by `resume` "
                       "once the server was back",
                       dirty_targets=dirty_targets(results), trials_lost=lost,
                       restore_s=None)
