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
from tests.faults.conftest import ECNTUNE, change_journalled, lost_trials, wait_until
from tests.faults.emu_helpers import (
    experiment,
    host_knobs,
    off_baseline,
    read_canary,
    run_holding_first_trial,
    sigkill_when,
)
from tuner.errors import ApplyError
from tuner.settings import Settings

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(240)]


def settled(emu) -> Settings:
    """The canary's read-back, or an empty Settings while a switch is half-way through a
    change (its queues bound to two profiles: the read-back refuses that state)."""
    try:
        return read_canary(emu)
    except ApplyError:
        return Settings()


@pytest.mark.slow  # ~30 s: a tuner killed, the dead-man timer firing
def test_deadman_restores_after_tuner_sigkill_without_recover(emu, tmp_path: Path,
                                                              reliability) -> None:
    exp = experiment(emu, tmp_path, trials=5, deadman=3)
    results = tmp_path / "results"
    journal = Journal(results / "journal.jsonl")
    proc, entry = run_holding_first_trial(emu, exp, journal)
    want = entry.settings.nics[f"{emu.host_names[1]}/mlx5_0"].rpg_time_reset

    def applied() -> bool:  # the switches go last: every target reads back the trial
        return (host_knobs(emu, emu.host_names[1]).get("rpg_time_reset") == want
                and not settled(emu).diff(entry.settings))

    t_kill = sigkill_when(proc, applied)
    dirty = off_baseline(read_canary(emu), entry.baseline)
    assert dirty, "the trial's settings should still be on the canary right after the kill"

    def healed() -> bool:
        return not settled(emu).diff(entry.baseline)

    assert wait_until(healed, 15, 0.25), off_baseline(read_canary(emu), entry.baseline)
    restore_s = time.monotonic() - t_kill
    assert restore_s < 3 + 2 + 3  # timeout + deadline resolution and poll + SSH slack
    assert journal.dirty() is not None  # nobody ran recover: the timers alone healed it
    assert lost_trials(results) == 0
    reliability.record("tuner SIGKILLed during a measurement, no `recover` (SSH)",
                       f"dead-man timers on the {len(dirty)} changed targets fired after "
                       "renewals stopped and restored the baseline by themselves",
                       dirty_targets=len(off_baseline(read_canary(emu), entry.baseline)),
                       trials_lost=lost_trials(results), restore_s=restore_s,
                       backend="ssh (emulated)")


@pytest.mark.slow
def test_sigkill_during_apply_then_recover(emu, tmp_path: Path, reliability) -> None:
    exp = experiment(emu, tmp_path, trials=5, deadman=120)  # timers too slow to matter here
    results = tmp_path / "results"
    journal = Journal(results / "journal.jsonl")
    switch = emu.switch_names[0]
    proc = subprocess.Popen([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: change_journalled(journal), 120, 0.01), proc.communicate()
        entry = journal.dirty()
        assert entry is not None
        want = entry.settings.nics[f"{emu.host_names[0]}/mlx5_0"].rpg_time_reset

        def nic_written() -> bool:
            return host_knobs(emu, emu.host_names[0]).get("rpg_time_reset") == want

        assert wait_until(nic_written, 60, 0.005)
        emu.inject(switch, hang={"ecnconfig": 60, "nv": 60})  # the switch write stalls
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)  # ... and the tuner dies in the middle of apply
        t_kill = time.monotonic()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    emu.clear_faults(switch)
    dirty = off_baseline(read_canary(emu), entry.baseline)
    assert dirty, "the NICs should still hold the trial's settings"
    out = subprocess.run([*ECNTUNE, "recover", str(exp)], capture_output=True, text=True,
                         timeout=120)
    restore_s = time.monotonic() - t_kill
    assert out.returncode == 0, out.stderr
    assert "verified by read-back" in out.stdout
    left = off_baseline(read_canary(emu), entry.baseline)
    assert left == [] and journal.dirty() is None
    assert lost_trials(results) == 0
    reliability.record("tuner SIGKILLed during apply (SSH), then `ecntune recover`",
                       f"{len(dirty)} targets left half-changed; `ecntune recover` restored "
                       "the journal's baseline and verified it by read-back",
                       dirty_targets=len(left), trials_lost=lost_trials(results),
                       restore_s=restore_s,
                       backend="ssh (emulated)")
