"""The tuner itself dies or is stopped mid-trial, on the simulated backend (real processes).

SIGKILL leaves the canary dirty (the sim's device state outlives the process, like a real
fabric's); ``ecntune recover`` must bring it back to the journal's baseline, verified. SIGTERM
and Ctrl-C (SIGINT) must restore before exiting 130. In every case no trial that Optuna was
told about may be missing afterwards.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from safety.journal import Journal
from tests.faults.conftest import (
    ECNTUNE,
    finished_trials,
    freeze_when,
    lost_trials,
    sim_experiment,
    start_run,
)
from tuner.cluster.statefile import read_state

pytestmark = pytest.mark.timeout(120)


def dirty_targets(results: Path) -> int:
    """Canary targets whose device state differs from the journal's baseline."""
    entries = Journal(results / "journal.jsonl").entries()
    state = read_state(results / "sim-state.json")
    if not entries or state is None:
        return 0
    return len({k.split(".", 1)[0] for k in state.diff(entries[0].baseline)})


def kill_mid_trial(exp: Path, sig: int, min_trial: int = 2) -> tuple[subprocess.Popen[str],
                                                                         float]:
    """Start a run and send ``sig`` once trial >= ``min_trial`` is applied and measuring."""
    results = exp.parent / "results"
    proc = start_run(exp)
    journal = Journal(results / "journal.jsonl")

    def applied() -> bool:
        e = journal.dirty() if journal.path.exists() else None
        if e is None or e.trial < min_trial:
            return False
        state = read_state(results / "sim-state.json")
        return state is not None and state == e.settings

    assert freeze_when(proc, applied), proc.communicate(timeout=30)
    if sig:
        proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)  # SIGTERM/SIGINT are handled once it runs again
    return proc, time.monotonic()


def test_sigkill_mid_measurement_then_recover(tmp_path: Path, reliability) -> None:
    exp = sim_experiment(tmp_path, trials=40, iterations=300, max_time_us=200_000)
    results = tmp_path / "results"
    proc, t_fault = kill_mid_trial(exp, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    left = dirty_targets(results)
    assert left == 5  # leaf0 + 4 NICs still on the trial's settings, as on a real fabric
    assert Journal(results / "journal.jsonl").dirty() is not None

    out = subprocess.run([*ECNTUNE, "recover", str(exp)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    restore_s = time.monotonic() - t_fault
    assert out.returncode == 0, out.stderr
    assert "5 target(s) were off the baseline" in out.stdout
    assert "verified by read-back" in out.stdout
    assert dirty_targets(results) == 0
    assert Journal(results / "journal.jsonl").dirty() is None
    lost = lost_trials(results)
    assert lost == 0
    # a second recover has nothing to do
    again = subprocess.run([*ECNTUNE, "recover", str(exp)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert again.returncode == 0 and "no open change" in again.stdout
    reliability.record("tuner SIGKILLed during a measurement",
                       f"canary left on trial settings ({left} targets); `ecntune recover` "
                       "restored the journal's baseline and verified it by read-back",
                       dirty_targets=dirty_targets(results), trials_lost=lost,
                       restore_s=restore_s)


@pytest.mark.parametrize("sig,name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_sigterm_and_ctrl_c_restore_before_exit(tmp_path: Path, reliability, sig: int,
                                                name: str) -> None:
    exp = sim_experiment(tmp_path, trials=40, iterations=300, max_time_us=200_000)
    results = tmp_path / "results"
    proc, t_fault = kill_mid_trial(exp, sig)
    _, err = proc.communicate(timeout=60)
    restore_s = time.monotonic() - t_fault
    assert proc.returncode == 130, err
    assert "canary restored" in err
    assert dirty_targets(results) == 0
    assert Journal(results / "journal.jsonl").dirty() is None
    states = finished_trials(results)
    assert "RUNNING" not in states.values()  # the interrupted trial was closed, not left open
    lost = lost_trials(results)
    assert lost == 0
    reliability.record(f"{name} during a measurement",
                       "stopped the measurement at its next poll, restored and verified the "
                       "baseline, told the trial FAIL (interrupted), exit 130",
                       dirty_targets=dirty_targets(results), trials_lost=lost,
                       restore_s=restore_s)


@pytest.mark.slow
def test_mlflow_store_unavailable_then_back(tmp_path: Path, reliability) -> None:
    """The MLflow store cannot be opened for a whole study: tuning stays safe, every trial is
    in Optuna, and once the store is back `ecntune resume` logs each one exactly once."""
    exp = sim_experiment(tmp_path, trials=3, iterations=20, max_time_us=50_000)
    blocker = tmp_path / "store"
    blocker.write_text("not a directory")  # sqlite cannot create store/mlflow.db
    uri = f"sqlite:///{blocker / 'mlflow.db'}"
    exp.write_text(exp.read_text().replace("tracking: {enabled: false}",
                                           f"tracking: {{enabled: true, uri: '{uri}'}}"))
    results = tmp_path / "results"
    run = subprocess.run([*ECNTUNE, "run", str(exp), "--quiet"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=240)
    assert run.returncode == 0, run.stderr
    states = finished_trials(results)
    assert len(states) == 4 and all(s in ("COMPLETE", "PRUNED", "FAIL")
                                    for s in states.values())
    assert dirty_targets(results) == 0
    blocker.unlink()
    blocker.mkdir()  # the store is back
    res = subprocess.run([*ECNTUNE, "resume", "--results", str(results), "--quiet"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert res.returncode == 0, res.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (mexp,) = [e for e in client.search_experiments() if e.name == "ecntune/faults"]
    runs = client.search_runs([mexp.experiment_id])
    trials = sorted(int(r.data.tags["ecntune.trial"]) for r in runs
                    if "ecntune.trial" in r.data.tags)
    assert trials == sorted(states)  # each trial logged once, none missing
    lost = len(set(states) - set(trials))
    reliability.record("MLflow store unavailable for a whole study",
                       "tuning went on (failures reported, canary restored after every "
                       "trial); all trials kept in Optuna and logged exactly once by "
                       "`ecntune resume` when the store was back",
                       dirty_targets=dirty_targets(results), trials_lost=lost, restore_s=None)
