"""Three ``ecntune worker`` processes share one study on PostgreSQL, each on its own simulated
slice, logging to one real ``mlflow server`` backed by PostgreSQL (``storage`` and
``tracking.uri`` both shared, as in docs/scale-out.md); one is SIGKILLed in the middle of a
trial and a new worker takes its slice over.

The workers run the default sampler (``twin``). Checked: every trial is recorded once (Optuna,
and one nested MLflow run each, all under one parent run) and the shared budget is spent
exactly; no slice is held twice (a held slice's lease cannot be acquired, the trials of one
slice never overlap in time, every lease is released at the end); the killed worker's trial is
failed, re-queued and run with the same params (the surviving workers wait for it:
``tuner.worker.budget_step``); its slice is restored (open journal change closed, devices back
on the baseline); no two workers measured the same proposal.

Deterministic by construction: the victim is frozen (SIGSTOP) at a moment its trial is known to
run with its change applied, and its lease checked while it is frozen; after the kill the
survivors cannot stop before the dead trial is failed, re-queued and run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scaleout.test_storage import tiny_yaml

ROOT = Path(__file__).resolve().parents[2]
SLICES = ("sim0", "sim1", "sim2")
TTL_S = 12  # lease TTL: renewed every 4 s; Optuna heartbeat 4 s, stale after 8 s (slack for
# a machine at load 15+, where the renewing thread waits for a core)
TRIALS = 6
pytestmark = pytest.mark.timeout(900)  # seconds idle, minutes under a load of 15+ on 2 cores


def experiment(tmp: Path, storage: str, tracking: str, mlflow_exp: str) -> Path:
    text = tiny_yaml(tmp / "results", storage, trials=TRIALS)
    text = text.replace("canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 3}")
    text = text.replace("sampler: {name: random, seed: 0}", "sampler: {seed: 0}")  # the default
    text = text.replace("tracking: {enabled: false}",
                        f"tracking: {{uri: '{tracking}', experiment: {mlflow_exp}}}")
    f = tmp / "exp.yaml"
    f.write_text(text)
    return f


def worker(exp: Path, slice_name: str, log: Path, *more: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "tuner", "worker", str(exp), "--slice",
                                 slice_name, "--lease-ttl", str(TTL_S), *more], cwd=exp.parent,
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def freeze_mid_trial(procs: dict[str, subprocess.Popen[bytes]], results: Path,
                     running: Callable[[], dict[str, int]], alive: Callable[[], None]
                     ) -> tuple[str, int]:
    """SIGSTOP a worker at a moment its searched trial runs with its change applied (open in
    the slice journal); returns (slice, trial number) with that worker still stopped.

    Polls the journals, files read in a millisecond: a trial's change is applied for only
    ~15 ms of its ~250 ms here (the rest is Optuna and MLflow), and polling the database first
    missed every window of a study on a loaded machine."""
    from safety.journal import Journal, JournalUnreadable

    journals = {s: Journal(results / "slices" / s / "journal.jsonl") for s in procs}
    end = time.monotonic() + 240
    while time.monotonic() < end:
        alive()
        if all(p.poll() is not None for p in procs.values()):
            pytest.fail("every worker finished before one was caught inside a trial")
        for s, p in procs.items():
            try:
                if journals[s].dirty() is None:
                    continue
            except JournalUnreadable:  # a record half-written as we read: look again frozen
                pass
            p.send_signal(signal.SIGSTOP)
            entry = journals[s].dirty()
            if entry is not None and running().get(s) == entry.trial:
                return s, entry.trial
            p.send_signal(signal.SIGCONT)
        time.sleep(0.002)
    pytest.fail("never caught a worker inside a trial")


@pytest.mark.slow  # ~40 s: three worker processes, one killed
def test_three_workers_one_killed_mid_trial(pg_url: str, mlflow_pg: str,
                                            tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tuner import optuna_io, study_store
    from tuner.cluster.statefile import read_state
    from tuner.lease import SliceLeases

    mlflow_exp = f"workers-{uuid.uuid4().hex[:8]}"
    exp = experiment(tmp_path, pg_url, mlflow_pg, mlflow_exp)
    logs = {s: tmp_path / f"{s}.log" for s in SLICES}  # the replacement logs to its slice's
    procs = {s: worker(exp, s, logs[s]) for s in SLICES}

    def alive() -> None:
        for name, p in procs.items():
            if p.poll() not in (None, 0):
                pytest.fail(f"worker {name} exited {p.returncode}:\n"
                            f"{logs[name[:4]].read_text()[-3000:]}")

    def running() -> dict[str, int]:
        """Slice -> its running searched trial (plain SQL: Optuna's tables may not exist yet,
        and this process must not race the workers creating them)."""
        import psycopg

        with psycopg.connect(pg_url) as c:
            if not c.execute("SELECT to_regclass('public.trial_user_attributes') IS NOT NULL"
                             ).fetchone()[0]:  # type: ignore[index]
                return {}
            rows = c.execute(
                "SELECT a.value_json, t.number FROM trials t JOIN trial_user_attributes a "
                "ON a.trial_id = t.trial_id AND a.key = 'slice' WHERE t.state = 'RUNNING' "
                "AND NOT EXISTS (SELECT 1 FROM trial_user_attributes r WHERE r.trial_id = "
                "t.trial_id AND r.key = 'role' AND r.value_json = '\"baseline\"')").fetchall()
        return {str(v).strip('"'): int(n) for v, n in rows}

    try:
        victim, killed = freeze_mid_trial(procs, tmp_path / "results", running, alive)
        # Frozen mid-trial, the victim still holds its slice: nobody else can take it.
        leases = SliceLeases(pg_url, "tiny", ttl_s=TTL_S)
        try:
            assert leases.acquire(victim) is None
            held = {r.slice: r for r in leases.rows()}
            assert held[victim].live and held[victim].holder != leases.holder
        finally:
            leases.close()
        procs[victim].send_signal(signal.SIGKILL)
        procs.pop(victim).wait()
        # A new worker for the slice waits out the dead one's lease, then restores the slice;
        # the dead worker's trial is failed and re-queued by whichever janitor sees it first.
        procs[f"{victim}b"] = worker(exp, victim, logs[victim], "--wait-lease", "60")
        for name, p in procs.items():
            assert p.wait(timeout=180) == 0, f"{name}:\n{logs[name[:4]].read_text()[-3000:]}"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    st = optuna_io.load_study("tiny", pg_url)
    trials = st.get_trials(deepcopy=False)
    dead = trials[killed]
    assert dead.user_attrs["verdict"] == "failed:worker_died"
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retry) == 1 and retry[0].params == dead.params
    assert retry[0].state.name in ("COMPLETE", "PRUNED", "FAIL")
    assert retry[0].user_attrs.get("slice") in SLICES, "the re-queued trial never ran"
    assert retry[0].user_attrs["verdict"] not in ("failed:worker_died", "interrupted")
    log2 = logs[victim].read_text()
    assert "lease taken over from" in log2
    assert f"open change of trial {killed} found: slice restored" in log2
    # Slices: each has its own baseline trial; no two trials of one slice overlap in time;
    # every lease (slices and the pseudo-slice locks) is released.
    assert sorted(t.user_attrs["slice"] for t in trials
                  if t.user_attrs.get("role") == "baseline") == list(SLICES)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    finished = [t for t in trials if t.number != killed]
    assert all(t.user_attrs.get("slice") in SLICES for t in finished)
    for s in SLICES:
        spans = sorted((t.datetime_start, t.datetime_complete) for t in finished
                       if t.user_attrs["slice"] == s)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"two trials on {s} at once"
    # The default sampler (twin): no two workers measured the same proposal (the re-queued
    # trial repeats the dead one's params by design).
    proposed = [tuple(sorted(t.params.items())) for t in finished
                if t.user_attrs.get("role") == "proposal" and t.number != retry[0].number]
    assert len(proposed) == TRIALS - 1 and len(set(proposed)) == len(proposed)
    assert (study_store.twin_trials(st) or 0) > 0  # counted per worker, summed
    leases = SliceLeases(pg_url, "tiny", ttl_s=TTL_S)
    try:
        assert leases.rows() == []
    finally:
        leases.close()
    # The shared budget, exactly: the dead trial counts once, by its re-run.
    searched = [t for t in finished if t.user_attrs.get("role") != "baseline"]
    assert len(searched) == TRIALS
    # The slice the dead worker left is back on its baseline, its journal closed.
    dead_slice = tmp_path / "results" / "slices" / victim
    assert "restored:recover" in (dead_slice / "journal.jsonl").read_text()
    state = read_state(dead_slice / "sim-state.json")
    other = next(s for s in SLICES if s != victim)
    assert state is not None
    assert state == read_state(tmp_path / "results" / "slices" / other / "sim-state.json")
    # MLflow: one parent run; one nested run per trial (the dead one too), each tagged with
    # its slice.
    client = MlflowClient(tracking_uri=mlflow_pg)
    runs = client.search_runs([client.get_experiment_by_name(mlflow_exp).experiment_id],
                              max_results=1000)
    parents = [r for r in runs if r.data.tags.get("ecntune.role") == "study"]
    nested = [r for r in runs if r.data.tags.get("ecntune.role") == "trial"]
    assert [p.info.run_id for p in parents] == [st.user_attrs["mlflow_parent_run_id"]]
    assert {r.data.tags["mlflow.parentRunId"] for r in nested} == {parents[0].info.run_id}
    numbers = sorted(int(r.data.tags["ecntune.trial"]) for r in nested)
    assert numbers == sorted(t.number for t in trials), "a trial logged twice or not at all"
    assert {r.data.tags["ecntune.slice"] for r in nested} == set(SLICES)
    by_number = {int(r.data.tags["ecntune.trial"]): r for r in nested}
    assert by_number[killed].data.tags["ecntune.verdict"] == "failed:worker_died"
