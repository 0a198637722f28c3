"""Faults on the SSH backend, against the emulated cluster (one real sshd per target).

The tuner runs as a real ``ecntune`` process; faults are injected with the emulated cluster's
hooks (``inject``, ``stop_target``, ``kill_sessions``, ``rotate_host_key``) or by killing the
tuner. Afterwards the canary is read back over SSH by the test itself and compared with the
baseline the journal recorded.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from safety.journal import Journal
from tests.faults.conftest import ECNTUNE, wait_until
from tuner.emulated import hosts as hostmod

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(240)]

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
safety: {{deadman_timeout_s: {deadman}, min_busbw_ratio: 0.0, max_pause_fraction: 1.0,
         poll_interval_s: 0.5}}
preflight: {{error_sample_s: 0.2}}
budget: {{trials: {trials}}}
sampler: {{name: random, seed: 5}}
tracking: {{enabled: false}}
results_dir: {results}
"""


def experiment(emu, tmp_path: Path, *, trials: int = 3, deadman: float = 3) -> Path:
    path = tmp_path / "emu.yaml"
    path.write_text(EXP.format(inventory=emu.inventory_path, trials=trials, deadman=deadman,
                               results=tmp_path / "results"))
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


@pytest.fixture
def emu(emulated_cluster):
    yield emulated_cluster
    for name in emulated_cluster.targets:  # hung stand-ins and timers die with the test
        emulated_cluster.clear_faults(name)
        emulated_cluster.kill_sessions(name)


def test_deadman_restores_after_tuner_sigkill_without_recover(emu, tmp_path: Path,
                                                              reliability) -> None:
    exp = experiment(emu, tmp_path, trials=5, deadman=3)
    results = tmp_path / "results"
    journal = Journal(results / "journal.jsonl")
    proc = subprocess.Popen([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # once the first change is journalled, make its measurement hang (mpirun sleeps)
        assert wait_until(lambda: journal.path.exists(), 120, 0.01), proc.communicate()
        emu.inject(emu.host_names[0], hang={"mpirun": 60})
        entry = journal.dirty()
        assert entry is not None
        want = entry.settings.nics[f"{emu.host_names[1]}/mlx5_0"].rpg_time_reset

        def applied() -> bool:
            return host_knobs(emu, emu.host_names[1]).get("rpg_time_reset") == want

        assert wait_until(applied, 60, 0.02)
        time.sleep(0.5)  # let apply finish on every target (the switches go last)
        proc.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    dirty = off_baseline(read_canary(emu), entry.baseline)
    assert dirty, "the trial's settings should still be on the canary right after the kill"

    def healed() -> bool:
        return not off_baseline(read_canary(emu), entry.baseline)

    assert wait_until(healed, 15, 0.25), off_baseline(read_canary(emu), entry.baseline)
    restore_s = time.monotonic() - t_kill
    assert restore_s < 3 + 1 + 4  # timeout + one poll + SSH/read-back slack
    assert journal.dirty() is not None  # nobody ran recover: the timers alone healed it
    reliability.record("tuner SIGKILLed during a measurement, no `recover` (SSH)",
                       f"dead-man timers on the {len(dirty)} changed targets fired after "
                       "renewals stopped and restored the baseline by themselves",
                       dirty_targets=len(off_baseline(read_canary(emu), entry.baseline)),
                       trials_lost=0, restore_s=restore_s, backend="ssh (emulated)")
