"""Helpers for the fault tests that run against the emulated cluster."""

from __future__ import annotations

from pathlib import Path

from tuner.emulated import hosts as hostmod

EXP = """
name: emu-faults
fabric: {{backend: ssh, inventory_file: {inventory}}}
workload:
  time_limit_s: 120
  parts:
    - {{kind: collective, op: all_reduce, size_bytes: 1048576, iterations: 2}}
search:
  knobs:
    kmin_bytes: {{low: 20000, high: 200000, log: true}}
    kmax_ratio: {{low: 1.5, high: 4}}
    rpg_time_reset: {{low: 2, high: 100, log: true}}
  warm_starts: false
safety: {{deadman_timeout_s: {deadman}, max_pause_fraction: 1.0, poll_interval_s: 0.5{more}}}
objective: {{guardrails: {{max_busbw_loss_percent: 100}}}}
preflight: {{error_sample_s: 0.2}}
budget: {{trials: {trials}, repeats: 1, baseline_every: 0, confirm_repeats: 0, confirm_top_k: 1,
         candidate_placements: 0}}
sampler: {{name: random, seed: 5}}
tracking: {{enabled: false}}
results_dir: {results}
"""


def experiment(emu, tmp_path: Path, *, trials: int = 3, deadman: float = 3,
               nvue_confirm_s: float | None = None) -> Path:
    path = tmp_path / "emu.yaml"
    more = "" if nvue_confirm_s is None else f", nvue_confirm_s: {nvue_confirm_s}"
    path.write_text(EXP.format(inventory=emu.inventory_path, trials=trials, deadman=deadman,
                               results=tmp_path / "results", more=more))
    return path


def read_canary(emu):
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import load_inventory

    with SshCluster(load_inventory(emu.inventory_path)) as c:
        return c.read_back()


def host_knobs(emu, host: str) -> dict[str, int | None]:
    tdir = emu.target_dir(host)
    return hostmod.read_knobs(tdir, emu.state(host))


def off_baseline(current, baseline) -> list[str]:
    return sorted({k.split(".", 1)[0] for k in current.diff(baseline)})


def run_holding_first_trial(emu, exp: Path, journal):
    """Start ``ecntune run exp``; once it journals its first change, make that trial's
    measurement hang (``mpirun`` sleeps) so the change stays applied. Returns (process,
    journal entry); the process is killed if that never happens."""
    import subprocess

    from tests.faults.conftest import ECNTUNE, change_journalled, wait_until

    proc = subprocess.Popen([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: change_journalled(journal), 120, 0.01), proc.communicate()
        emu.inject(emu.host_names[0], hang={"mpirun": 60})
        entry = journal.dirty()
        assert entry is not None
    except BaseException:
        proc.kill()
        raise
    return proc, entry


def sigkill_when(proc, ready) -> float:
    """SIGKILL the tuner once ``ready()`` holds; returns the (monotonic) time of the kill."""
    import signal
    import time

    from tests.faults.conftest import wait_until

    try:
        assert wait_until(ready, 60, 0.02)
        proc.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        proc.wait(timeout=10)
        return t_kill
    finally:
        if proc.poll() is None:
            proc.kill()
