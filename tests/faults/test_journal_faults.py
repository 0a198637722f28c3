"""The journal and the results-folder lock under real faults, with real ``ecntune`` processes on
the simulated backend (whose device state outlives the process, like a real fabric's):

* a torn last journal line (a crash or a full disk in the middle of a record);
* a disk that fills up while journalling (a real 16 KiB tmpfs under the journal);
* two tuners on one canary (the second is refused; so is a ``recover`` under a live run);
* ``recover`` without arguments finds ``results/*/journal.jsonl``.
"""

from __future__ import annotations

import json
import os
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
from tests.faults.test_sim_crash import dirty_targets, kill_mid_trial
from tuner.cluster.statefile import read_state

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def ecntune(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ECNTUNE, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stderr


def test_torn_journal_line(tmp_path: Path, reliability) -> None:
    exp = sim_experiment(tmp_path, trials=2, iterations=3)
    results = tmp_path / "results"
    first = ecntune("run", str(exp), "--quiet", "--no-mlflow", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    journal = results / "journal.jsonl"
    # power lost in the middle of the last record: its end is gone
    raw = journal.read_bytes()
    journal.write_bytes(raw[:-40])
    n_lines = raw.count(b"\n")
    state_before = read_state(results / "sim-state.json")

    refused = ecntune("run", str(exp), "--quiet", "--no-mlflow", cwd=tmp_path)
    no_traceback(refused)
    assert refused.returncode == 4, refused.stderr
    assert f"line {n_lines}" in refused.stderr and "possibly open" in refused.stderr
    assert "ecntune recover" in refused.stderr
    assert read_state(results / "sim-state.json") == state_before  # nothing touched

    t0 = time.monotonic()
    rec = ecntune("recover", str(exp), cwd=tmp_path)
    no_traceback(rec)
    assert rec.returncode == 0, rec.stderr
    assert f"line {n_lines}" in rec.stdout and "verified by read-back" in rec.stdout
    restore_s = time.monotonic() - t0
    assert Journal(journal).dirty() is None

    # the next run appends after the torn line, never onto it: a SIGKILL mid-trial is
    # found by recover (the hole this closes: recover said "no open change")
    exp.write_text(exp.read_text().replace("trials: 2", "trials: 40").replace(
        "iterations: 3", "iterations: 300").replace("max_time_us: 20000",
                                                    "max_time_us: 200000"))
    proc, _ = kill_mid_trial(exp, signal.SIGKILL, min_trial=1)
    proc.wait(timeout=30)
    assert dirty_targets(results) == 5
    lines = journal.read_bytes().split(b"\n")
    assert not lines[n_lines - 1].endswith(b"}")  # the torn line, kept and terminated
    again = ecntune("recover", str(exp), cwd=tmp_path)
    assert again.returncode == 0 and "5 target(s) were off the baseline" in again.stdout
    assert dirty_targets(results) == 0 and Journal(journal).dirty() is None
    reliability.record("torn last journal line (record cut by a crash)",
                       "`run` refused with exit 4 naming the line as a possibly open change "
                       "(canary untouched); `recover` restored and verified the recorded "
                       "baseline; the next records were appended after the torn line, so a "
                       "later SIGKILL mid-trial was found and healed by `recover`",
                       dirty_targets=dirty_targets(results), trials_lost=lost_trials(results),
                       restore_s=restore_s)


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                          str(where)], capture_output=True)
    return res.returncode == 0


@pytest.fixture
def tiny_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "16k"):
        pytest.skip("needs root to mount a tmpfs")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_disk_full_while_journalling(tmp_path: Path, tiny_disk: Path, reliability,
                                    request: pytest.FixtureRequest) -> None:
    exp = sim_experiment(tmp_path, trials=40, iterations=3)
    results = tmp_path / "results"
    results.mkdir()
    # The journal file itself lives on the tiny tmpfs, bind-mounted in place (a symlink would
    # be refused: the journal is opened O_NOFOLLOW).
    (tiny_disk / "journal.jsonl").touch()
    (results / "journal.jsonl").touch()
    subprocess.run(["mount", "--bind", str(tiny_disk / "journal.jsonl"),
                    str(results / "journal.jsonl")], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(results / "journal.jsonl")],
                                                check=False))
    t0 = time.monotonic()
    full = ecntune("run", str(exp), "--quiet", "--no-mlflow", cwd=tmp_path)
    no_traceback(full)
    assert full.returncode == 4, (full.stdout, full.stderr)
    assert "cannot write (No space left on device)" in full.stderr
    assert "ecntune recover" in full.stderr
    assert dirty_targets(results) == 0  # the loop restored the baseline before exiting
    assert sum(s == "COMPLETE" for s in finished_trials(results).values()) >= 2
    subprocess.run(["mount", "-o", "remount,size=1m", str(tiny_disk)], check=True)
    rec = ecntune("recover", str(exp), cwd=tmp_path)
    no_traceback(rec)
    assert rec.returncode == 0, rec.stderr
    restore_s = time.monotonic() - t0
    assert Journal(results / "journal.jsonl").dirty() is None
    assert dirty_targets(results) == 0
    lost = lost_trials(results)
    assert lost == 0
    reliability.record("disk full while journalling (16 KiB tmpfs under the journal)",
                       "exit 4 with `cannot write (No space left on device)` and the "
                       "`recover` command, no traceback, canary restored before exiting; "
                       "once space was back `recover` closed the possibly open change",
                       dirty_targets=dirty_targets(results), trials_lost=lost,
                       restore_s=restore_s)


def test_two_concurrent_tuners_second_is_refused(tmp_path: Path, reliability) -> None:
    exp = sim_experiment(tmp_path, trials=40, iterations=300, max_time_us=200_000)
    results = tmp_path / "results"
    first, _ = kill_mid_trial(exp, 0, min_trial=1)  # signal 0: just wait for a live change
    try:
        t0 = time.monotonic()
        second = ecntune("run", str(exp), "--quiet", "--no-mlflow", cwd=tmp_path)
        refused_s = time.monotonic() - t0
        no_traceback(second)
        assert second.returncode == 3, second.stderr
        assert "in use by another ecntune process" in second.stderr
        assert f"pid {first.pid}" in second.stderr and "`ecntune run`" in second.stderr
        rec = ecntune("recover", str(exp), cwd=tmp_path)  # never underneath a live run
        assert rec.returncode == 3 and "in use by another ecntune process" in rec.stderr
        studies = {json.loads(x)["study"] for x in
                   (results / "journal.jsonl").read_text().splitlines()
                   if '"begin"' in x}
        assert len(studies) == 1  # only the first tuner ever journalled a change
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 130
    assert dirty_targets(results) == 0
    reliability.record("two concurrent tuners on one results folder",
                       f"the second `run` (and a `recover`) refused in {refused_s:.1f} s with "
                       "exit 3 naming the holder's pid, nothing touched; the first ran on and "
                       "restored on SIGTERM",
                       dirty_targets=dirty_targets(results), trials_lost=lost_trials(results),
                       restore_s=None)


def test_recover_without_arguments_scans_results_folders(tmp_path: Path) -> None:
    exp = sim_experiment(tmp_path, trials=40, iterations=300, max_time_us=200_000)
    exp.write_text(exp.read_text().replace(f"results_dir: {tmp_path / 'results'}",
                                           "results_dir: results/faults"))
    results = tmp_path / "results" / "faults"
    proc = start_run(exp)
    journal = Journal(results / "journal.jsonl")
    assert freeze_when(proc, lambda: journal.path.exists() and journal.dirty() is not None)
    proc.kill()  # stopped with its change open: killed with it open
    proc.wait(timeout=30)
    rec = ecntune("recover", cwd=tmp_path)
    no_traceback(rec)
    assert rec.returncode == 0, rec.stderr
    assert "found results/faults/journal.jsonl" in rec.stdout
    assert "verified by read-back" in rec.stdout and journal.dirty() is None
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    none = ecntune("recover", cwd=empty)
    no_traceback(none)
    assert none.returncode == 2 and "no journal found" in none.stderr
    assert "results/*/journal.jsonl" in none.stderr
