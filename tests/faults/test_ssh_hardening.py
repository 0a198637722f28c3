"""Attacks on the dead-man timers and the target locks, against the emulated cluster (one real
``sshd`` per target; each target's ``XDG_RUNTIME_DIR`` is its own ``<root>/<name>/run``):

* another local user pre-created a target's runtime directory (the ``/tmp`` attack);
* a second tuner on "another machine" (its own results folder, so no local lock) while the
  first one has a change armed;
* a target that reboots in the middle of a trial (its timer and runtime files vanish).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from safety.journal import Journal
from tests.faults.conftest import ECNTUNE, lost_trials, wait_until
from tests.faults.emu_helpers import experiment, host_knobs, off_baseline, read_canary
from tests.faults.test_ssh_study_faults import run_study

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
                       "the arm answered `unsafe` on that host: nothing applied anywhere, "
                       f"study stopped with exit 3 naming the directory ({stopped_s:.1f} s "
                       "including pre-flight); nothing written in it",
                       dirty_targets=len(dirty), trials_lost=lost_trials(results),
                       restore_s=None, backend="ssh (emulated)")


def test_second_tuner_on_another_machine_is_refused_by_the_targets(emu, tmp_path: Path,
                                                                   reliability) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    exp1 = experiment(emu, first_dir, trials=3, deadman=5)
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
                       "every changed target refused the second tuner's arm (`locked <token> "
                       f"armed`): nothing applied, exit 3 after {refused_s:.1f} s (pre-flight "
                       "and baseline included); the first finished normally",
                       dirty_targets=len(dirty),
                       trials_lost=lost_trials(first_dir / "results")
                       + lost_trials(second_dir / "results"),
                       restore_s=None, backend="ssh (emulated)")


def test_target_reboot_mid_trial(emu, tmp_path: Path, reliability) -> None:
    host = emu.host_names[1]
    t_fault: list[float] = []

    def reboot_during_first_trial(n: int) -> None:
        if n == 2:  # measurement 1 is the baseline
            emu.inject(emu.host_names[0], hang={"mpirun": 60})

            def reboot() -> None:
                t_fault.append(time.time())
                emu.reboot(host)
                emu.clear_faults(emu.host_names[0])
            threading.Timer(1.0, reboot).start()

    verdicts, error, exp_path, baseline = run_study(emu, tmp_path,
                                                    at_measure=reboot_during_first_trial)
    assert error is None, error
    assert t_fault
    assert verdicts.split(",")[1] == "failed:measurement", verdicts
    import optuna

    results = exp_path.parent / "results"
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    detail = str(study.trials[1].user_attrs.get("detail", ""))
    assert f"dead-man timer gone on ['{host}/mlx5_0']" in detail, detail
    journal = Journal(results / "journal.jsonl")
    ends = [e for e in journal.entries() if e.trial == 1]
    assert ends and ends[0].closed and journal.dirty() is None
    restored_at = max(ends[0].began_at, t_fault[0])
    records = [json.loads(x) for x in (results / "journal.jsonl").read_text().splitlines()]
    restore_s = next(r["at"] for r in records if r.get("id") == ends[0].id
                     and r.get("outcome") == "restored") - restored_at
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    lost = lost_trials(results)
    assert lost == 0
    reliability.record("a target rebooting mid-trial (timer and runtime files gone, device "
                       "settings kept)",
                       "the next renewal answered `missing`: measurement stopped at its next "
                       "poll, trial failed:measurement, baseline restored and verified at "
                       "once, study went on",
                       dirty_targets=len(dirty), trials_lost=lost, restore_s=restore_s,
                       backend="ssh (emulated)")
