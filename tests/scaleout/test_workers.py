"""Three ``ecntune worker`` processes share one study on PostgreSQL, each on its own simulated
slice, logging to one MLflow store; one is SIGKILLed in the middle of a trial and a new worker
takes its slice over.

Checked: every trial is recorded once (Optuna and one nested MLflow run each, all under one
parent run); no slice is held twice (a worker for a held slice is refused, and the trials of
one slice never overlap in time); the killed worker's trial is failed and re-run with the same
params; its slice is restored (open journal change closed, devices back on the baseline).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scaleout.test_storage import tiny_yaml

ROOT = Path(__file__).resolve().parents[2]
TTL_S = 9  # lease TTL; Optuna heartbeat 3 s, grace 6 s
TRIALS = 24  # enough that the study outlasts the held-slice check before the kill

pytestmark = pytest.mark.slow  # ~2 min: 4 worker processes, a lease expiry


def experiment(tmp: Path, storage: str, tracking: str) -> Path:
    text = tiny_yaml(tmp / "results", storage, trials=TRIALS)
    text = text.replace("canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 3}")
    text = text.replace("sampler: {name: random, seed: 0}",
                        "sampler: {name: tpe, seed: 0, startup_trials: 4}")
    text = text.replace("tracking: {enabled: false}",
                        f"tracking: {{uri: '{tracking}', experiment: workers}}")
    f = tmp / "exp.yaml"
    f.write_text(text)
    return f


def worker(exp: Path, slice_name: str, log: Path, *more: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "tuner", "worker", str(exp), "--slice",
                                 slice_name, "--lease-ttl", str(TTL_S), *more], cwd=exp.parent,
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_for(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.3)


def freeze_mid_trial(procs: dict[str, subprocess.Popen[bytes]], results: Path,
                     running) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """SIGSTOP a worker at a moment its trial runs with its change applied (open in the slice
    journal); returns (slice, trial number)."""
    from safety.journal import Journal

    end = time.monotonic() + 180
    while time.monotonic() < end:
        for s, n in running().items():
            procs[s].send_signal(signal.SIGSTOP)
            entry = Journal(results / "slices" / s / "journal.jsonl").dirty()
            if running().get(s) == n and entry is not None and entry.trial == n:
                return s, n
            procs[s].send_signal(signal.SIGCONT)
        time.sleep(0.1)
    pytest.fail("never caught a worker inside a trial")


def test_three_workers_one_killed_mid_trial(pg_url: str, tmp_path: Path,
                                            mlflow_template: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tuner import optuna_io
    from tuner.cluster.statefile import read_state

    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = experiment(tmp_path, pg_url, tracking)
    logs = {s: tmp_path / f"{s}.log" for s in ("sim0", "sim1", "sim2")}  # sim2b logs to sim2
    procs = {s: worker(exp, s, logs[s]) for s in logs}

    def study():  # type: ignore[no-untyped-def]
        return optuna_io.load_study("tiny", pg_url)

    def alive() -> None:
        for name, p in procs.items():
            if p.poll() not in (None, 0):
                pytest.fail(f"worker {name} exited {p.returncode}:\n"
                            f"{logs[name[:4]].read_text()[-3000:]}")

    def created() -> bool:  # plain SQL: this process must not race the workers creating
        import psycopg  # Optuna's tables

        alive()
        with psycopg.connect(pg_url) as c:
            return bool(c.execute("SELECT to_regclass('public.studies') IS NOT NULL AND "
                                  "to_regclass('public.alembic_version') IS NOT NULL"
                                  ).fetchone()[0])  # type: ignore[index]

    def running() -> dict[str, int]:
        """Slice -> its running (searched) trial."""
        try:
            st = study()
        except Exception:  # no study yet
            return {}
        return {t.user_attrs["slice"]: t.number for t in st.get_trials(deepcopy=False)
                if t.state.name == "RUNNING" and "slice" in t.user_attrs
                and t.user_attrs.get("role") != "baseline"}

    def baselines() -> int:
        alive()
        try:
            return sum(t.user_attrs.get("role") == "baseline" and t.state.name == "COMPLETE"
                       for t in study().get_trials(deepcopy=False))
        except Exception:
            return 0

    wait_for(created, 240, "the workers to create the study's tables")
    time.sleep(2)  # the creating worker commits its version row right after
    wait_for(lambda: baselines() == 3, 240, "the three slices' baselines")
    busy = subprocess.run([sys.executable, "-m", "tuner", "worker", str(exp), "--slice", "sim1"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert busy.returncode == 3 and "slice sim1 of study tiny is held by" in busy.stderr
    victim, killed = freeze_mid_trial(procs, tmp_path / "results", running)
    procs[victim].send_signal(signal.SIGKILL)
    procs.pop(victim).wait()
    dead_slice = tmp_path / "results" / "slices" / victim
    # A new worker for that slice waits out the dead one's lease, then restores the slice; the
    # dead worker's trial is failed and re-queued by whichever janitor sees it stale first.
    procs[f"{victim}b"] = worker(exp, victim, logs[victim], "--wait-lease", "60")
    for name, p in procs.items():
        assert p.wait(timeout=600) == 0, f"{name}:\n{logs[name[:4]].read_text()[-3000:]}"

    st = study()
    trials = st.get_trials(deepcopy=False)
    dead = trials[killed]
    assert dead.user_attrs["verdict"] == "failed:worker_died"
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retry) == 1 and retry[0].params == dead.params
    assert retry[0].state.name in ("COMPLETE", "PRUNED")
    log2 = logs[victim].read_text()
    assert "lease taken over from" in log2
    assert f"open change of trial {killed} found: slice restored" in log2
    # Slices: each has its own baseline trial; no two trials of one slice overlap in time.
    assert sorted(t.user_attrs["slice"] for t in trials
                  if t.user_attrs.get("role") == "baseline") == ["sim0", "sim1", "sim2"]
    finished = [t for t in trials if t.state.name != "RUNNING" and t.number != killed]
    assert all(t.user_attrs.get("slice") in ("sim0", "sim1", "sim2") for t in finished)
    for s in ("sim0", "sim1", "sim2"):
        spans = sorted((t.datetime_start, t.datetime_complete) for t in finished
                       if t.user_attrs["slice"] == s)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"two trials on {s} at once"
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    searched = [t for t in finished if t.user_attrs.get("role") != "baseline"]
    assert len(searched) == TRIALS
    # The slice the dead worker left is back on its baseline, its journal closed.
    assert "restored:recover" in (dead_slice / "journal.jsonl").read_text()
    state = read_state(dead_slice / "sim-state.json")
    other = next(s for s in ("sim0", "sim1", "sim2") if s != victim)
    assert state is not None
    assert state == read_state(tmp_path / "results" / "slices" / other / "sim-state.json")
    # MLflow: one parent run; one nested run per finished trial, each tagged with its slice.
    client = MlflowClient(tracking_uri=tracking)
    runs = client.search_runs([client.get_experiment_by_name("workers").experiment_id],
                              max_results=1000)
    parents = [r for r in runs if r.data.tags.get("ecntune.role") == "study"]
    nested = [r for r in runs if r.data.tags.get("ecntune.role") == "trial"]
    assert [p.info.run_id for p in parents] == [st.user_attrs["mlflow_parent_run_id"]]
    assert {r.data.tags["mlflow.parentRunId"] for r in nested} == {parents[0].info.run_id}
    numbers = sorted(int(r.data.tags["ecntune.trial"]) for r in nested)
    assert numbers == sorted(t.number for t in trials), "a trial logged twice or not at all"
    assert {r.data.tags["ecntune.slice"] for r in nested} == {"sim0", "sim1", "sim2"}
