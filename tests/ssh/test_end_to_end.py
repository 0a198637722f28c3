"""``ecntune run experiments/emulated-ssh.yaml``: the whole closed loop over SSH, on the
emulated cluster, exactly as a user runs it (a separate process, the repository's file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.cluster.ssh import SshCluster
from tuner.emulated.cluster import EmulatedCluster
from tuner.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "emulated-ssh.yaml"

pytestmark = pytest.mark.ssh


@pytest.mark.slow  # ~160 s (a baseline and a trial over the emulated cluster)
def test_emulated_ssh_experiment_tunes_and_restores(emulated_cluster: EmulatedCluster,
                                                     tmp_path: Path) -> None:
    emu = emulated_cluster
    inv = load_inventory(emu.inventory_path)
    with SshCluster(inv) as c:
        before = c.snapshot()
        counters_before = c.counters()
    env = {**os.environ, "ECNTUNE_EMU_ROOT": str(emu.root)}
    res = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(EXPERIMENT), "--trials", "1",
         "--results", str(tmp_path / "results"), "--no-mlflow", "--quiet"],
        capture_output=True, text=True, env=env, timeout=240, check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "canary: baseline restored" in res.stdout

    import optuna

    url = f"sqlite:///{tmp_path / 'results' / 'optuna.db'}"
    [summary] = optuna.get_all_study_summaries(storage=url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2  # the baseline (trial 0) and one tuned trial
    assert all(t.value is not None for t in done)
    assert done[1].params and done[1].params != done[0].params

    with SshCluster(inv) as c:
        assert c.snapshot() == before  # the canary is back where it was
        delta = c.counters().delta(counters_before)
    # Real traffic ran through the emulated NICs and switches (rocesim behind the stand-ins).
    assert delta.total("tx_prio3_packets") > 0
    assert delta.total("rx_prio3_packets") > 0


@pytest.mark.slow
def test_a_trial_whose_probe_misses_the_collectives_is_failed_measurement(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    """After the baseline, the probe hosts start their probes late (a slow QP set-up): the
    trial's probe samples an idle fabric, so the trial is failed:measurement, never scored."""
    import time

    import optuna

    emu = emulated_cluster
    env = {**os.environ, "ECNTUNE_EMU_ROOT": str(emu.root)}
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", str(EXPERIMENT), "--trials", "1",
         "--results", str(results), "--no-mlflow", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 200
        while not list(results.glob("*/trial-0000.json")):  # the baseline was measured
            assert proc.poll() is None and time.monotonic() < deadline, "no baseline"
            time.sleep(0.1)
        for host in ("host0", "host1"):
            emu.inject(host, hang={"ib_write_lat": 12})
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    url = f"sqlite:///{results / 'optuna.db'}"
    [summary] = optuna.get_all_study_summaries(storage=url)
    trials = optuna.load_study(study_name=summary.study_name, storage=url).trials
    verdicts = [t.user_attrs.get("verdict") for t in trials]
    assert verdicts[:2] == ["baseline", "failed:measurement"], out[-2000:]
    assert trials[1].value is None
    assert "not latency under load" in str(trials[1].user_attrs), trials[1].user_attrs
    assert "canary: baseline restored" in out
