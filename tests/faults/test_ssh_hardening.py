"""Attacks on the dead-man timers and the target locks, against the emulated cluster (one real
``sshd`` per target; each target's ``ECNTUNE_DEADMAN_DIR`` is its own ``<root>/<name>/run``):

* another local user pre-created a target's runtime directory (the ``/tmp`` attack);
* a second tuner on "another machine" (its own results folder, so no local lock) while the
  first one has a change armed.
(A target that reboots mid-trial: tests/faults/test_reboot.py.)
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from safety.journal import Journal
from tests.faults.conftest import ECNTUNE, lost_trials, wait_until
from tests.faults.emu_helpers import experiment, host_knobs, off_baseline, read_canary

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(300)]

NOBODY = 65534


def test_hostile_deadman_directory_is_refused(emu, tmp_path: Path, reliability) -> None:
    host = emu.host_names[1]
    hostile = emu.target_dir(host) / "run" / "ecntune"
    hostile.mkdir(mode=0o777)
    os.chmod(hostile, 0o1777)
    os.chown(hostile, NOBODY, NOBODY)  # pre-created by another user, world-writable
    exp = experiment(emu, tmp_path, trials=2, deadman=5)
    baseline = read_canary(emu)
    t0 = time.monotonic()
    res = subprocess.run([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow"],
                         capture_output=True, text=True, timeout=240)
    stopped_s = time.monotonic() - t0
    assert "Traceback" not in res.stderr
    assert res.returncode == 3, res.stderr
    assert f"{host}/mlx5_0: unsafe {hostile} is not a 0700 directory" in res.stderr
    assert "nothing was applied" in res.stderr
    assert sorted(p.name for p in hostile.iterdir()) == []  # nothing planted, nothing read
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    results = tmp_path / "results"
    assert Journal(results / "journal.jsonl").dirty() is None
    reliability.record("a hostile dead-man directory (pre-created world-writable by `nobody` "
                       "on one host)",
                       "the arm answered `unsafe` on that host: nothing applied anywhere (the "
                       "trial it stopped on was never measured), "
                       f"study stopped with exit 3 naming the directory ({stopped_s:.1f} s "
                       "including pre-flight); nothing written in it",
                       dirty_targets=len(dirty),
                       trials_lost=lost_trials(results, measured_only=True),
                       restore_s=None, backend="ssh (emulated)")


def test_second_tuner_on_another_machine_is_refused_by_the_targets(emu, tmp_path: Path,
                                                                   reliability) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    # The first tuner applies NVUE without commit-confirm: a pending confirm would stop the
    # second one at pre-flight (nvue_confirm, tested in tests/ssh/test_emulated_switch.py)
    # before it reaches the targets' locks, which are what this test is about.
    exp1 = experiment(emu, first_dir, trials=3, deadman=5, nvue_confirm_s=0)
    exp2 = experiment(emu, second_dir, trials=3, deadman=5)
    baseline = read_canary(emu)
    journal1 = Journal(first_dir / "results" / "journal.jsonl")
    first = subprocess.Popen([*ECNTUNE, "run", str(exp1), "--quiet", "--no-mlflow"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: journal1.path.exists(), 120, 0.01)
        emu.inject(emu.host_names[0], hang={"mpirun": 30})  # the first trial stays applied
        entry = journal1.dirty()
        assert entry is not None
        want = entry.settings.nics[f"{emu.host_names[1]}/mlx5_0"].rpg_time_reset
        assert wait_until(lambda: host_knobs(emu, emu.host_names[1]).get("rpg_time_reset")
                          == want, 60, 0.02)
        time.sleep(1.0)  # every target written and armed
        t0 = time.monotonic()
        second = subprocess.run([*ECNTUNE, "run", str(exp2), "--quiet", "--no-mlflow"],
                                capture_output=True, text=True, timeout=240)
        refused_s = time.monotonic() - t0
        assert "Traceback" not in second.stderr
        assert second.returncode == 3, second.stderr
        assert "locked" in second.stderr and "armed" in second.stderr
        assert "nothing was applied" in second.stderr
        # the second tuner journalled a change but never applied it: the canary still holds
        # the first tuner's trial, not something of the second's
        assert host_knobs(emu, emu.host_names[1]).get("rpg_time_reset") == want
    finally:
        emu.clear_faults(emu.host_names[0])
        out, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    reliability.record("a second tuner on another machine (own results folder) while the "
                       "first has a change armed",
                       "the canary's locks, held by the first tuner's armed change, refused "
                       "the second tuner before it read a baseline (`locked <token> armed`): "
                       f"nothing applied, exit 3 after {refused_s:.1f} s (pre-flight "
                       "included); the first finished normally",
                       dirty_targets=len(dirty),
                       trials_lost=lost_trials(first_dir / "results")
                       + lost_trials(second_dir / "results", measured_only=True),
                       restore_s=None, backend="ssh (emulated)")
