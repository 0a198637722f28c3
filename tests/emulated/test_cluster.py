"""The emulated cluster itself: startup, teardown, host-key verification, fault hooks."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from tests.emulated.helpers import connect, run
from tuner.emulated import EmulatedCluster, _procs, sshd_available
from tuner.emulated.cluster import free_base_address
from tuner.inventory import load_inventory

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(
    not sshd_available(), reason="/usr/sbin/sshd missing (apt-get install openssh-server)")]


def _sshd_pids(root: Path) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(root).encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def test_up_down_leaves_nothing_behind(tmp_path: Path) -> None:
    # Own address block so it does not collide with the session cluster (or other runs).
    base = free_base_address(first=30)
    t0 = time.monotonic()
    with EmulatedCluster(tmp_path, base_address=base) as emu:
        startup_s = time.monotonic() - t0
        assert len(_sshd_pids(tmp_path)) == 6
        code, out, _ = run(emu, "host2", "echo $ECNTUNE_EMU_NAME")
        assert (code, out) == (0, "host2\n")
        idle = connect(emu, "leaf1")  # an open connection must not survive stop()
    assert startup_s < 3.0, f"4 hosts + 2 switches took {startup_s:.2f} s to start"
    deadline = time.monotonic() + 3
    while _sshd_pids(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sshd_pids(tmp_path) == []
    idle.close()


def test_inventory_has_agreed_schema(emulated_cluster: EmulatedCluster) -> None:
    inv = yaml.safe_load(emulated_cluster.inventory_path.read_text())
    assert inv["ssh"]["known_hosts"] == str(emulated_cluster.known_hosts)
    assert inv["ssh"]["trust_on_first_use"] is False
    assert [h["name"] for h in inv["hosts"]] == ["host0", "host1", "host2", "host3"]
    h1 = inv["hosts"][1]
    base = emulated_cluster.targets["leaf0"].address.rsplit(".", 1)[0]
    assert h1["address"] == f"{base}.12" and h1["port"] == 22 and h1["user"] == "root"
    assert h1["nic_layout"] == "debugfs" and inv["hosts"][0]["nic_layout"] == "sysfs"
    assert h1["sysfs_root"] == str(emulated_cluster.root / "host1")
    assert Path(h1["key_file"]).stat().st_mode & 0o077 == 0
    sw = {s["name"]: s for s in inv["switches"]}
    assert sw["leaf0"]["platform"] == "sonic" and sw["leaf0"]["address"] == f"{base}.2"
    assert sw["leaf0"]["canary_ports"] == ["Ethernet0", "Ethernet4"]
    assert sw["leaf1"]["platform"] == "nvue" and sw["leaf1"]["canary_ports"] == ["swp1", "swp2"]
    assert inv["launcher"]["host"] == "host0"
    assert "{np}" in inv["launcher"]["mpirun"] and "{hostlist}" in inv["launcher"]["mpirun"]


def test_inventory_loads_with_the_inventory_model(emulated_cluster: EmulatedCluster) -> None:
    inv = load_inventory(emulated_cluster.inventory_path)
    assert [h.nic_layout for h in inv.hosts] == ["sysfs", "debugfs", "sysfs", "debugfs"]
    assert {s.platform for s in inv.switches} == {"sonic", "nvue"}


def test_host_key_verified_and_rotation_refused(emulated_cluster: EmulatedCluster) -> None:
    code, out, _ = run(emulated_cluster, "host3", "echo ok")
    assert (code, out) == (0, "ok\n")
    emulated_cluster.rotate_host_key("host3")
    with pytest.raises(paramiko.BadHostKeyException):
        connect(emulated_cluster, "host3")
    # Unknown host (empty known_hosts) is refused too under RejectPolicy.
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(emulated_cluster.targets["host0"].address, username="root",
                       key_filename=str(emulated_cluster.client_key), allow_agent=False,
                       look_for_keys=False)
    emulated_cluster.restore_host_key("host3")
    assert run(emulated_cluster, "host3", "echo back")[1] == "back\n"


def test_sysfs_write_reads_back_on_both_layouts(emulated_cluster: EmulatedCluster) -> None:
    root = emulated_cluster.root
    ofed = f"{root}/host0/sys/class/net/ens1f0np0/ecn/roce_rp/rpg_time_reset"
    code, out, err = run(emulated_cluster, "host0", f"echo 55 > {ofed} && cat {ofed}")
    assert (code, out, err) == (0, "55\n", "")
    dbg = f"{root}/host1/sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/rp_time_reset"
    code, out, _ = run(emulated_cluster, "host1", f"cat {dbg}; echo 77 > {dbg}; cat {dbg}")
    assert (code, out) == (0, "300\n77\n")


def test_refused_write_fails_like_firmware(emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.inject("host0", refuse_write={"rpg_ai_rate": "EINVAL"})
    knob = f"{emulated_cluster.root}/host0/sys/class/net/ens1f0np0/ecn/roce_rp/rpg_ai_rate"
    code, out, err = run(emulated_cluster, "host0", f"echo 9 > {knob}")
    assert code == 1
    assert err == "bash: line 1: echo: write error: Invalid argument\n"
    assert run(emulated_cluster, "host0", f"cat {knob}")[1] == "5\n"
    # The SSH backend's form: cd into the folder, printf under `timeout ... bash -c`.
    folder = knob.rsplit("/", 1)[0]
    code, _, err = run(emulated_cluster, "host0", f"cd {folder} && timeout --kill-after=5 10 "
                       "bash -c \"printf '%s\\n' 11 > rpg_ai_rate\"")
    assert code == 1 and err.endswith("printf: write error: Invalid argument\n")
    assert run(emulated_cluster, "host0", f"cat {knob}")[1] == "5\n"
    # Other knobs still write.
    other = knob.replace("rpg_ai_rate", "rpg_hai_rate")
    assert run(emulated_cluster, "host0", f"echo 60 > {other}; cat {other}")[1] == "60\n"
    emulated_cluster.clear_faults("host0")
    assert run(emulated_cluster, "host0", f"echo 9 > {knob}; cat {knob}")[1] == "9\n"


def test_hang_and_exit_code_faults(emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.inject("host2", exit_code={"ethtool": 3})
    code, _, err = run(emulated_cluster, "host2", "ethtool -S ens1f0np0")
    assert code == 3 and "injected" in err
    emulated_cluster.inject("host2", exit_code={"ethtool": 0}, hang={"ethtool": 0.5})
    t0 = time.monotonic()
    code, out, _ = run(emulated_cluster, "host2", "ethtool -S ens1f0np0")
    assert code == 0 and out.startswith("NIC statistics:\n")
    assert time.monotonic() - t0 >= 0.5


def test_stop_start_and_kill_sessions(emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.stop_target("host1")
    with pytest.raises((paramiko.SSHException, OSError)):
        connect(emulated_cluster, "host1", timeout=1.0)
    emulated_cluster.start_target("host1")
    client = connect(emulated_cluster, "host1")
    _, stdout, _ = client.exec_command("echo started; sleep 20; echo never")
    assert stdout.readline() == "started\n"
    assert emulated_cluster.kill_sessions("host1") >= 1
    assert "never" not in stdout.read().decode()
    client.close()
    deadline = time.monotonic() + 10  # SIGKILL is asynchronous (slow on a loaded machine)
    while [p for p in os.listdir("/proc") if p.isdigit() and _is_sleep_of(
            int(p), emulated_cluster.root)]:
        assert time.monotonic() < deadline, "session processes survived kill_sessions"
        time.sleep(0.05)


def _is_sleep_of(pid: int, root: Path) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
        return f"ECNTUNE_EMU_ROOT={root}".encode() in env.split(b"\0")
    except OSError:
        return False


def test_the_cnp_priority_a_host_holds_reaches_the_fabric(
        emulated_cluster: EmulatedCluster) -> None:
    """An NP knob the tuner does not search, set on a host by hand (CNPs in the data's
    priority 3 instead of the factory's strict 6), is what the fabric behind the cluster runs:
    rocesim then queues that NIC's CNPs behind the data."""
    from tuner.emulated import fabric
    from tuner.emulated.hosts import knob_relpaths

    root = emulated_cluster.root
    knob = root / "host1" / knob_relpaths(emulated_cluster.state("host1"))["cnp_802p_prio"]
    assert fabric.applied_settings(root)["nics"]["host1/mlx5_0"]["cnp_802p_prio"] == 6
    knob.write_text("3\n")
    try:
        settings = fabric.applied_settings(root)
        assert settings["nics"]["host1/mlx5_0"]["cnp_802p_prio"] == 3
        assert "cnp_dscp" in settings["nics"]["host1/mlx5_0"]  # read, but not a rocesim knob
        built = fabric.build_fabric(root, settings)
        assert built.dcqcn("host1/mlx5_0").cnp_802p_prio == 3
        assert built.dcqcn("host0/mlx5_0").cnp_802p_prio == 6
    finally:
        knob.write_text("6\n")


def test_kill_all_stops_a_shell_before_its_child_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Child first, with a pause after each SIGKILL (a loaded machine): the shell must not get
    to run ``echo never``."""
    shell = subprocess.Popen(["bash", "-c", "echo started; sleep 20; echo never"],
                             stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None and shell.stdout.readline() == "started\n"
    deadline = time.monotonic() + 5  # bash forks `sleep` after it has echoed
    while not (child := _procs.descendants(shell.pid)):
        assert time.monotonic() < deadline, "bash never started sleep"
        time.sleep(0.01)
    assert len(child) == 1
    real_kill = _procs.kill

    def slow_kill(pid: int, sig: int) -> int:
        sent = real_kill(pid, sig)
        if sig == signal.SIGKILL:
            time.sleep(0.3)
        return sent

    monkeypatch.setattr(_procs, "kill", slow_kill)
    assert _procs.kill_all([child[0], shell.pid]) == [child[0], shell.pid]
    assert shell.stdout.read() == ""
    assert shell.wait(timeout=5) == -signal.SIGKILL
