"""The inventory is code (red team L1), on the emulated cluster:

* an nccl-tests binary another account could change stops ``ecntune run`` at pre-flight, naming
  host and path, before anything is applied; vouched for by ``launcher.trusted_dirs`` it passes;
* pre-flight lists what the study will execute (``executes`` rows), and the hosts' command
  logs show the measurement then ran exactly those lines.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from safety.journal import Journal
from tests.faults.conftest import ECNTUNE
from tests.faults.emu_helpers import experiment, off_baseline, read_canary
from tests.ssh.conftest import run_preflight
from tuner.cluster.ssh import SshCluster
from tuner.experiment import load_experiment
from tuner.inventory import load_inventory
from tuner.ssh.exec_plan import SEP
from tuner.ssh.rails import command as rails_command

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(240)]

TOOLS = ("mpirun", "ib_write_lat", "ib_write_bw")
WORKLOAD = {"parts": [{"kind": "collective", "op": "all_reduce", "size_bytes": 1048576,
                       "iterations": 2},
                      {"kind": "background", "pattern": "incast", "load": 0.3, "fan_in": 1},
                      {"kind": "probe", "size_bytes": 64, "pairs": 1}],
            "time_limit_s": 90}


def _inventory(emu: Any, tmp_path: Path, **launcher: Any) -> Path:
    inv = yaml.safe_load(Path(emu.inventory_path).read_text())
    inv["launcher"].update(launcher)
    path = tmp_path / "inv-l1.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_run_refuses_a_binary_another_account_could_change(emu, tmp_path: Path,
                                                           reliability) -> None:
    d = tmp_path / "nccl-tests"
    d.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    binary = d / "all_reduce_perf"
    shutil.copy2(emu.bin_dir / "all_reduce_perf", binary)
    binary.chmod(0o777)  # any local account can replace what every rank runs
    exp = experiment(emu, tmp_path, trials=2)
    inv = _inventory(emu, tmp_path, nccl_tests_dir=str(d))
    exp.write_text(exp.read_text().replace(str(emu.inventory_path), str(inv)))
    baseline = read_canary(emu)
    t0 = time.monotonic()
    res = subprocess.run([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow"],
                         capture_output=True, text=True, timeout=200)
    stopped_s = time.monotonic() - t0
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.returncode == 3, res.stderr
    for host in emu.host_names:
        assert (f"executables {host}: {binary}: {binary} writable by group or others "
                "(mode 0777)") in res.stderr, res.stderr
    assert "nothing was changed" in res.stderr
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    assert Journal(tmp_path / "results" / "journal.jsonl").dirty() is None
    inv.write_text(inv.read_text().replace("launcher:\n", f"launcher:\n  trusted_dirs: [{d}]\n"))
    ok = subprocess.run([*ECNTUNE, "preflight", str(exp), "--json"], capture_output=True,
                        text=True, timeout=200)
    assert ok.returncode == 0, ok.stderr
    rows = [json.loads(ln) for ln in ok.stdout.splitlines() if ln.startswith("{")]
    assert {r["status"] for r in rows if r["check"] == "executables"} == {"warn"}
    reliability.record("a world-writable nccl-tests binary (`launcher.nccl_tests_dir`; every "
                       "rank would run whatever another account put there)",
                       f"`ecntune run` stopped at pre-flight with exit 3 ({stopped_s:.1f} s), "
                       f"naming each of the {len(emu.host_names)} hosts and the binary's path "
                       "and mode; nothing applied; with `launcher.trusted_dirs` naming the "
                       "directory, pre-flight passed with a warning",
                       dirty_targets=len(dirty), trials_lost=0, restore_s=None,
                       backend="ssh (emulated)")


def _printed(rows: list[dict[str, Any]]) -> dict[str, list[list[str]]]:
    """``host/tool -> argument lists`` of the printed lines (the words after the tool, as the
    stand-ins log them)."""
    out: dict[str, list[list[str]]] = {}
    for r in rows:
        host = r["target"].split(" ")[0]
        words = shlex.split(r["evidence"].split(SEP, 1)[1])
        for tool in TOOLS:
            if tool in words:
                out.setdefault(f"{host}/{tool}", []).append(words[words.index(tool) + 1:])
    return out


def _measured_n(argv: list[str]) -> list[str]:
    """The measured pass's ``-n`` is sized at run time: masked on both sides."""
    return [("<n>" if prev == "-n" and "-N" in argv else w)
            for prev, w in zip(["", *argv], argv, strict=False)]


def test_preflight_lists_what_the_measurement_then_runs(emu, tmp_path: Path,
                                                       reliability) -> None:
    inv = yaml.safe_load(Path(emu.inventory_path).read_text())
    inv["launcher"].update(perftest_iterations=200, nccl_cycles=3)
    res, out = run_preflight(emu, tmp_path, inv, "emu-plan", WORKLOAD)
    assert res.exit_code == 0, res.output
    plan = [r for r in out if r["check"] == "executes"]
    printed = _printed(plan)
    assert sorted(printed) == ["host0/ib_write_bw", "host0/ib_write_lat", "host0/mpirun",
                               "host1/ib_write_bw", "host1/ib_write_lat"], printed
    roles = {r["evidence"].split(SEP)[0] for r in plan}  # the device commands too
    assert {"host0/mlx5_0 read", "host0/mlx5_0 write (form: the values are each trial's)",
            "leaf0 read", "leaf1 counters"} <= roles
    emu.reset()
    with SshCluster(load_inventory(tmp_path / "inv.yaml")) as cluster:
        cluster.measure(load_experiment(tmp_path / "exp.yaml").workload)
    ran = {f"{h}/{tool}": emu.commands(h, tool) for h in emu.host_names for tool in TOOLS
           if emu.commands(h, tool)}
    assert sorted(ran) == sorted(printed)
    for key, runs in ran.items():
        assert sorted(map(_measured_n, runs)) == sorted(map(_measured_n, printed[key])), key
    n = sum(len(v) for v in ran.values())
    reliability.record("an inventory whose launcher line, environment or binaries the operator "
                       "has not read (the inventory is code)",
                       f"`ecntune preflight` listed {len(plan)} command lines, each with its "
                       "host and as whom it runs (login user or `sudo -n`), secrets "
                       "redacted; the measurement then "
                       f"ran exactly the {n} printed mpirun/ib_write_lat/ib_write_bw lines "
                       "(the hosts' command logs; the measured pass's -n sized at run time)",
                       dirty_targets=0, trials_lost=0, restore_s=None,
                       backend="ssh (emulated)")


@pytest.mark.parametrize("timeout_s", [60, 0])
def test_preflight_lists_the_dead_man_and_lock_commands(emu, tmp_path: Path,
                                                       timeout_s: int) -> None:
    """Per device: the lock check always; with timers on, the arm (whose restore is the
    driver's own write back, the form the ``write`` row shows), the renewal and the disarm;
    built by the same ``DeadmanTimer`` the study uses, under the target's sudo setting."""
    inv = yaml.safe_load(Path(emu.inventory_path).read_text())
    exp_extra = {"safety": {"deadman_timeout_s": timeout_s}}
    res, out = run_preflight(emu, tmp_path, inv, "emu-deadman", WORKLOAD, extra=exp_extra)
    assert res.exit_code == 0, res.output
    rows = {(r["target"], r["evidence"].split(SEP)[0]): r["evidence"].split(SEP, 1)[1]
            for r in out if r["check"] == "executes"}
    host0 = "host0 (login user)" if not inv["hosts"][0].get("sudo") else "host0 (sudo -n)"
    devices = {k[1].split()[0] for k in rows if k[1].endswith(" read")}
    assert {"host0/mlx5_0", "leaf0"} <= devices
    locks = [k for k in rows if " lock check" in k[1]]
    assert sorted(k[1].split()[0] for k in locks) == sorted(devices)
    arms = {k: v for k, v in rows.items() if " dead-man arm" in k[1]}
    if timeout_s == 0:
        assert arms == {} and not any("dead-man" in k[1] for k in rows)
        return
    assert sorted(k[1].split()[0] for k in arms) == sorted(devices)
    write = rows[(host0, "host0/mlx5_0 write (form: the values are each trial's)")]
    arm = next(v for k, v in arms.items() if k[1].startswith("host0/mlx5_0 "))
    # the restore, inside the timer's quoted loop script, is the driver's own write
    assert shlex.quote(f"( set +C; {write} ) || rc=1")[1:-1] in arm
    assert {k[1].split(" dead-man ")[1].split(",")[0] for k in rows if "dead-man" in k[1]} == {
        "arm", "renew", "disarm"}
    # each host's rails check, read-only and never under sudo
    rails = sorted(k[0] for k in rows if k[1].startswith("rails check"))
    assert rails == sorted(f"{h} (login user)" for h in emu.host_names)
    assert rows[("host0 (login user)", "rails check against sysfs, read-only, before any "
                 "write")] == rails_command(load_inventory(tmp_path / "inv.yaml").hosts[0])
