"""The SSH backend against the emulated cluster: real sshd per target on 127.0.10.x, stand-in
tools keeping state on disk, faults injected through faults.json (tuner.emulated)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ssh.conftest import gone, stand_ins
from tuner.cluster.ssh import SshCluster
from tuner.emulated.cluster import EmulatedCluster
from tuner.errors import ApplyError
from tuner.inventory import Inventory, parse_inventory
from tuner.settings import DcqcnSettings, EcnSettings, Settings
from tuner.ssh.transport import CommandError, Connection, HostKeyError
from tuner.workload import ProbePart, Workload

pytestmark = pytest.mark.ssh

NEW = {"kmin_bytes": 200_000, "kmax_bytes": 800_000, "pmax_percent": 20,
       "rpg_time_reset": 150, "min_time_between_cnps": 4, "rpg_ai_rate": 10}


@pytest.fixture
def emu(emulated_cluster: EmulatedCluster) -> EmulatedCluster:
    """The session's emulated cluster (tests/conftest.py), reset to factory state."""
    return emulated_cluster


def _addr(emu: EmulatedCluster, name: str) -> str:
    return emu.targets[name].address


def _inventory(emu: EmulatedCluster, **ssh: Any) -> Inventory:
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    data["ssh"].update({"connect_retries": 2, "retry_backoff_s": 0.05, **ssh})
    return parse_inventory(data, str(emu.inventory_path))


@pytest.fixture
def cluster(emu: EmulatedCluster) -> Iterator[SshCluster]:
    emu.reset()
    with SshCluster(_inventory(emu)) as c:
        yield c
    emu.reset()


def _new(base: Settings) -> Settings:
    return Settings.uniform(list(base.switches), list(base.nics), NEW)


def test_snapshot_apply_read_back_on_both_layouts_and_both_switches(
        cluster: SshCluster, emu: EmulatedCluster) -> None:
    base = cluster.snapshot()
    assert sorted(base.switches) == ["leaf0", "leaf1"]
    assert sorted(base.nics) == [f"host{i}/mlx5_0" for i in range(4)]
    assert base.nics["host1/mlx5_0"] == DcqcnSettings()  # factory values everywhere
    assert base.switches["leaf0"] == EcnSettings()
    layouts = {k: d.layout for k, d in cluster.drivers().items() if hasattr(d, "layout")}
    assert layouts == {"host0/mlx5_0": "sysfs", "host1/mlx5_0": "debugfs",
                       "host2/mlx5_0": "sysfs", "host3/mlx5_0": "debugfs"}
    new = _new(base)
    cluster.apply(new)
    assert cluster.read_back() == new
    # The devices' own files hold the values, under each layout's real names.
    h0, h1 = emu.target_dir("host0"), emu.target_dir("host1")
    assert (h0 / "sys/class/net/ens1f0np0/ecn/roce_rp/rpg_time_reset").read_text() == "150\n"
    assert (h0 / "sys/class/net/ens1f0np0/ecn/roce_np/min_time_between_cnps").read_text() \
        == "4\n"
    assert (h1 / "sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/rp_time_reset").read_text() \
        == "150\n"
    cluster.apply(base)
    assert cluster.read_back() == base


def test_a_refused_nic_write_rolls_every_target_back(cluster: SshCluster,
                                                     emu: EmulatedCluster) -> None:
    base = cluster.snapshot()
    emu.inject("host2", refuse_write={"rpg_ai_rate": "EINVAL"})
    with pytest.raises(ApplyError) as err:
        cluster.apply(_new(base))
    msg = str(err.value)
    assert "apply failed on ['host2/mlx5_0']" in msg and "Invalid argument" in msg
    assert "restored [" in msg and "'leaf0'" in msg and "'host0/mlx5_0'" in msg
    emu.clear_faults("host2")
    assert cluster.read_back() == base


def test_a_failing_ecnconfig_rolls_back(cluster: SshCluster, emu: EmulatedCluster) -> None:
    base = cluster.snapshot()
    emu.inject("leaf0", exit_code={"ecnconfig": 1})  # every ecnconfig call fails
    with pytest.raises(ApplyError, match=r"apply failed on \['leaf0'\]") as err:
        cluster.apply(_new(base))
    assert "'leaf0'" not in str(err.value).split("restored")[1]  # nothing to undo there
    emu.clear_faults("leaf0")
    assert cluster.read_back() == base


def test_a_sonic_write_failing_part_way_is_undone(cluster: SshCluster,
                                                  emu: EmulatedCluster) -> None:
    base = cluster.snapshot()
    new = _new(base)
    first = new.model_copy(update={"switches": {**base.switches, "leaf1": new.switches["leaf1"]}})
    cluster.apply(first)  # leaf1 changed, leaf0 still at base
    emu.inject("leaf0", ecnconfig_fail_after=0)  # CONFIG_DB writes fail, reads work
    with pytest.raises(ApplyError, match="Unable to connect to redis"):
        cluster.apply(new)
    emu.clear_faults("leaf0")
    assert cluster.read_back() == first  # all or nothing: the previous trial's settings


def test_a_hanging_command_times_out_and_dies_remotely(cluster: SshCluster,
                                                       emu: EmulatedCluster) -> None:
    emu.inject("host0", hang={"ethtool": 60})
    conn = cluster.pool["host0"]
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="timed out") as err:
        conn.run("ethtool -S ens1f0np0", timeout_s=1)
    assert time.monotonic() - t0 < 5
    assert err.value.target == "host0"
    assert gone(emu, "ethtool"), "the hung stand-in must die on the remote side"
    # A started command (how measurements run) is stopped by kill(), remotely.
    proc = conn.start("ethtool -S ens1f0np0", timeout_s=30)
    deadline = time.monotonic() + 5
    while not stand_ins(emu, "ethtool") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stand_ins(emu, "ethtool"), "the stand-in should be running (hung)"
    proc.kill()
    assert gone(emu, "ethtool")
    emu.clear_faults("host0")
    assert conn.run("echo still-usable").stdout == "still-usable\n"


def test_nonzero_exit_and_stderr_are_reported(cluster: SshCluster) -> None:
    conn = cluster.pool["host1"]
    with pytest.raises(CommandError) as err:
        conn.run("echo oops >&2; exit 3")
    assert err.value.status == 3 and "oops" in str(err.value)
    res = conn.run("echo oops >&2; exit 3", check=False)
    assert (res.status, res.stderr) == (3, "oops\n")


def test_a_dropped_connection_is_reopened(cluster: SshCluster, emu: EmulatedCluster) -> None:
    conn = cluster.pool["host1"]
    assert conn.run("echo one").stdout == "one\n"
    assert emu.kill_sessions("host1") > 0
    time.sleep(0.2)
    assert conn.run("echo two").stdout == "two\n"


def test_one_unreachable_target_is_one_failed_outcome(emu: EmulatedCluster) -> None:
    emu.reset()
    with SshCluster(_inventory(emu)) as c:
        emu.stop_target("host3")
        try:
            res = c.pool.fan_out(lambda conn: conn.run("hostname; echo ok").stdout)
        finally:
            emu.start_target("host3")
    assert sorted(n for n, o in res.items() if not o.ok) == ["host3"]
    want = f"cannot connect to {_addr(emu, 'host3')}:22 after 2 attempts"
    assert want in str(res["host3"].error)
    assert all(o.value and o.value.endswith("ok\n") for n, o in res.items() if n != "host3")


def test_a_changed_host_key_is_refused_with_its_fingerprint(emu: EmulatedCluster) -> None:
    emu.reset()
    emu.rotate_host_key("host1")
    pub = emu.keys_dir / "host1_host_ed25519.pub"
    try:
        offered = _openssh_fingerprint(pub)
        conn = Connection(_endpoint(emu, "host1"))
        with pytest.raises(HostKeyError) as err:
            conn.connect()
    finally:
        emu.restore_host_key("host1")
    expected = _openssh_fingerprint(pub)  # the key known_hosts holds
    msg = str(err.value)
    assert msg.startswith(f"host1: host key for {_addr(emu, 'host1')}:22 CHANGED")
    # The fingerprints are OpenSSH's own (what `ssh-keygen -lf` prints on the console).
    assert f"server offers ssh-ed25519 {offered}" in msg and f"has {expected}" in msg
    assert offered != expected


def _openssh_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]  # "256 SHA256:... comment (ED25519)"


def test_unknown_keys_need_trust_on_first_use(emu: EmulatedCluster, tmp_path: Path) -> None:
    emu.reset()
    known = tmp_path / "known_hosts"
    with pytest.raises(HostKeyError, match="is not in .*trust_on_first_use"):
        Connection(_endpoint(emu, "host0", known_hosts=str(known))).connect()
    assert not known.exists()
    conn = Connection(_endpoint(emu, "host0", known_hosts=str(known), trust_on_first_use=True))
    assert conn.run("echo hi").stdout == "hi\n"
    conn.close()
    assert known.read_text().startswith(f"{_addr(emu, 'host0')} ssh-ed25519 ")
    # Now the remembered key is verified the normal way.
    Connection(_endpoint(emu, "host0", known_hosts=str(known))).connect()


def _endpoint(emu: EmulatedCluster, name: str, **over: Any) -> Any:
    from dataclasses import replace

    from tuner.cluster.ssh import endpoints

    return replace(endpoints(_inventory(emu))[name], **over)


@pytest.mark.skipif(shutil.which("sudo") is None, reason="sudo not installed")
def test_sudo_hosts_use_sudo_for_devices_and_not_for_measurements(emu: EmulatedCluster,
                                                                  ) -> None:
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    for h in data["hosts"]:
        h["sudo"] = True  # the emulated user is root: `sudo -n` needs no password
    inv = parse_inventory(data)
    with SshCluster(inv) as c:
        who = c.pool["host1"].run("id -u; echo ${SUDO_USER:-none}").stdout.split()
        assert who == ["0", "root"]  # really went through sudo (SUDO_USER is set by sudo)
        base = c.snapshot()
        new = _new(base)
        c.apply(new)
        assert c.read_back() == new
        c.apply(base)
        assert c.read_back() == base
        # ... but the measurement runs as the login user with that session's PATH: under
        # sudo's secure_path the stand-in perftest, like an HPC-X build, is not even found
        m = c.measure(Workload(parts=[ProbePart(size_bytes=64, pairs=1)], time_limit_s=60))
        assert m.latency is not None and m.latency.count > 0


def test_an_unknown_wred_profile_is_refused_before_any_write(emu: EmulatedCluster) -> None:
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    sonic = next(s for s in data["switches"] if s["platform"] == "sonic")
    sonic["wred_profile"] = "NOT_CONFIGURED"
    with SshCluster(parse_inventory(data)) as c:
        with pytest.raises(ApplyError, match="'NOT_CONFIGURED' does not exist on the switch"):
            c.snapshot()
        before = emu.state(sonic["name"])["config_db"]["WRED_PROFILE"]
        with pytest.raises(ApplyError):
            c.apply(Settings(switches={sonic["name"]: EcnSettings(kmin_bytes=5_000,
                                                                  kmax_bytes=9_000)}))
        assert emu.state(sonic["name"])["config_db"]["WRED_PROFILE"] == before
        assert "NOT_CONFIGURED" not in before


def test_a_hanging_switch_cli_fails_the_apply_and_the_rest_is_restored(
        emu: EmulatedCluster) -> None:
    # 5 s: a loaded 2-core machine runs leaf0's several stand-in commands in well under that,
    # and the hung `nv` (30 s) still times out
    with SshCluster(_inventory(emu, command_timeout_s=5)) as c:
        base = c.snapshot()
        emu.inject("leaf1", hang={"nv": 30})
        t0 = time.monotonic()
        with pytest.raises(ApplyError, match=r"leaf1: write failed \(timed out") as err:
            c.apply(_new(base))
        assert time.monotonic() - t0 < 25
        assert "restored [" in str(err.value) and "'leaf0'" in str(err.value)
        emu.clear_faults("leaf1")
        assert c.read_back() == base


def test_a_connection_dropped_mid_write_is_rolled_back(emu: EmulatedCluster) -> None:
    import threading

    with SshCluster(_inventory(emu)) as c:
        base = c.snapshot()
        emu.inject("leaf0", hang={"ecnconfig": 5})  # the write command is slow: cut it
        errors: list[BaseException] = []

        def apply() -> None:
            try:
                c.apply(_new(base))
            except BaseException as exc:  # noqa: BLE001 - examined below
                errors.append(exc)

        worker = threading.Thread(target=apply)
        worker.start()
        deadline = time.monotonic() + 10
        while not stand_ins(emu, "ecnconfig") and time.monotonic() < deadline:
            time.sleep(0.05)  # until leaf0's write command is running (hung in ecnconfig)
        assert emu.kill_sessions("leaf0") > 0  # the link drops mid-command
        emu.clear_faults("leaf0")
        worker.join(60)
        assert len(errors) == 1 and isinstance(errors[0], ApplyError)
        msg = str(errors[0])
        assert "apply failed on ['leaf0']" in msg and "connection lost" in msg
        assert "'leaf0'" in msg.split("restored")[1]  # outcome unknown: put back to be sure
        assert c.read_back() == base  # leaf0 (reconnected) and every other target


def test_secrets_stay_out_of_errors_and_logs(emu: EmulatedCluster,
                                             caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from pydantic import SecretStr

    from tuner.ssh.transport import SshError

    ep = _endpoint(emu, "host2", key_file=None, password=SecretStr("hunter2-pw"),
                   key_passphrase=SecretStr("phrase-xyz"), connect_retries=1)
    caplog.set_level(logging.DEBUG)  # paramiko's own debug logging included
    with pytest.raises(SshError) as err:
        Connection(ep).connect()  # the emulated sshd accepts keys only
    assert "authentication failed for root@" in str(err.value)
    for text in (str(err.value), caplog.text, repr(ep)):
        assert "hunter2-pw" not in text and "phrase-xyz" not in text
