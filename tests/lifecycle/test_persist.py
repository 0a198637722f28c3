"""Persistence per platform. Pure: the boot unit passes ``systemd-analyze verify`` and names its
device the way ``systemd-escape`` does; the mlxconfig read-back parses a real mstconfig query
(fixture copied from shared/reference/mlx5-dcqcn-config/, source line kept). Emulated (real
sshd): each platform's save is read back from its persistent source, and a simulated reboot
(runtime state replaced by the boot-time source) comes back with the promoted values."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.emulated.helpers import run
from tuner.drivers import Mlx5DebugfsDriver, Mlx5SysfsDriver
from tuner.emulated import EmulatedCluster
from tuner.emulated.hosts import knob_relpaths
from tuner.emulated.state import locked, write_json
from tuner.errors import ApplyError
from tuner.inventory import HostEntry, load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.lifecycle.persist import (
    BootUnit,
    Mlxconfig,
    persist,
    persistence_for,
    read_persistent,
    systemd_escape,
    unsaved_changes,
)
from tuner.settings import KNOBS, NIC_KNOBS, DcqcnSettings, EcnSettings

FIXTURES = Path(__file__).parent / "fixtures"
WIN_ECN = EcnSettings(kmin_bytes=200_000, kmax_bytes=800_000, pmax_percent=20)
WIN_NIC = DcqcnSettings(rpg_time_reset=150, rpg_ai_rate=40, min_time_between_cnps=4)
HOST = HostEntry(name="host0", address="10.0.0.1", netdev="ens1f0np0", rdma_device="mlx5_0",
                 pci="0000:3b:00.0", nic_gbps=100)


@pytest.mark.parametrize("driver_cls", [Mlx5SysfsDriver, Mlx5DebugfsDriver])
def test_boot_unit_passes_systemd_analyze(driver_cls: type, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    unit = BootUnit(driver_cls(None, HOST))
    path = tmp_path / unit.unit
    path.write_text(unit.unit_text(WIN_NIC))
    res = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                         text=True, timeout=60)
    complaints = [ln for ln in res.stderr.splitlines()
                  if unit.unit in ln and "non-existent unit multi-user.target" not in ln]
    assert res.returncode == 0 and not complaints, res.stderr
    assert unit.unit_text(WIN_NIC).count("ExecStart=") == len(NIC_KNOBS)


@pytest.mark.parametrize("name", ["sys-subsystem-net-devices-ens1f0np0", "eth-1.100",
                                  ".hidden", "en p0"])
def test_unit_name_escaping_matches_systemd_escape(name: str) -> None:
    if shutil.which("systemd-escape") is None:
        pytest.skip("systemd-escape not installed")
    ref = subprocess.run(["systemd-escape", "--", name], capture_output=True, text=True,
                         timeout=30).stdout.strip()
    assert systemd_escape(name) == ref


def test_mlxconfig_commands_and_factory_query() -> None:
    """The read-back of a real ConnectX-4 Lx query is the factory DCQCN (port 1 = _P1)."""
    m = Mlxconfig(Mlx5SysfsDriver(None, HOST))  # type: ignore[arg-type]
    cmd = m.save_commands(WIN_NIC)[0]
    assert cmd.startswith("mlxconfig -d 0000:3b:00.0 -y set CLAMP_TGT_RATE_P1=0 ")
    assert "RPG_TIME_RESET_P1=150" in cmd and "MIN_TIME_BETWEEN_CNPS_P1=4" in cmd
    text = (FIXTURES / "mstconfig-query-cx4lx-roce-cc-defaults.txt").read_text()
    body = "".join(text.splitlines(keepends=True)[1:])  # drop the "# source:" line
    assert m.parse(body) == DcqcnSettings()
    assert DcqcnSettings().rpg_time_reset == KNOBS["rpg_time_reset"].default == 300


# -- emulated cluster ---------------------------------------------------------------------


def _boot(emu: EmulatedCluster, unit_text: str, host: str) -> None:
    """What a reboot does to a host: factory DCQCN in the files, then systemd runs the unit's
    ExecStart lines in order (here over SSH, as the host's shell would)."""
    state = emu.state(host)
    for knob, rel in knob_relpaths(state).items():
        if knob in KNOBS:
            (emu.target_dir(host) / rel).write_text(f"{KNOBS[knob].default}\n")
    starts = [ln.removeprefix("ExecStart=") for ln in unit_text.splitlines()
              if ln.startswith("ExecStart=")]
    rc, _, err = run(emu, host, " && ".join(starts))
    assert rc == 0, err


def _reboot_switch(emu: EmulatedCluster, name: str) -> None:
    """A switch boots from its saved configuration."""
    tdir = emu.target_dir(name)
    with locked(tdir):
        s = emu.state(name)
        if s["platform"] == "sonic":
            s["config_db"] = s["saved_config_db"]
        else:
            s["applied"] = s["pending"] = s["startup"]
        write_json(tdir / "state.json", s)


@pytest.mark.ssh
@pytest.mark.timeout(180)
def test_persist_survives_a_reboot_on_every_platform(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    for h in emu.host_names:  # boot units of an earlier test are not factory state
        shutil.rmtree(emu.target_dir(h) / "etc", ignore_errors=True)
    # NVUE with auto-save off (Cumulus Linux <= 5.8): there `nv config save` is what persists;
    # with auto-save on, the write below would already be the startup configuration.
    emu.edit_state("leaf1", lambda s: s.update(auto_save=False))
    with Fleet(load_inventory(emu.inventory_path)) as fleet:
        want = {k: (WIN_NIC if fleet.is_nic(k) else WIN_ECN) for k in fleet.keys}
        assert all(o.error is None for o in fleet.fan(lambda d: d.write(want[d.target]))
                   .values())
        plans = {k: persistence_for(fleet.driver(k)) for k in fleet.keys}
        methods = {k: p.method for k, p in plans.items()}
        assert methods["leaf0"] == "config-save" and methods["leaf1"] == "nv-config-save"
        assert methods["host0/mlx5_0"] == "boot-unit"

        # Before: the switches' saved configuration is still the factory one, no unit exists.
        before = fleet.fan(lambda d: read_persistent(plans[d.target]))
        assert before["leaf0"].value == EcnSettings() and before["leaf1"].value == EcnSettings()
        assert all(isinstance(before[h].error, ApplyError) for h in fleet.keys if "/" in h)

        saved = fleet.fan(lambda d: persist(plans[d.target], want[d.target]))
        assert {k: o.value for k, o in saved.items()} == want, saved

        # Reboot everything; the live settings come back from the persistent sources.
        for k, p in plans.items():
            if isinstance(p, BootUnit):  # the unit file sits in the host's fake root
                _boot(emu, Path(p.unit_path).read_text(), k.split("/")[0])
            else:
                _reboot_switch(emu, k)
        live, failed = fleet.read_settings()
        assert not failed
        assert {**live.switches, **live.nics} == want

        # A hand-edited unit no longer verifies.
        p0 = plans["host0/mlx5_0"]
        path = Path(p0.unit_path)
        path.write_text(path.read_text().replace("echo 150 ", "echo 300 "))
        assert read_persistent(p0) != WIN_NIC


def test_unsaved_changes_names_every_foreign_entry() -> None:
    saved = {"PORT": {"Ethernet8": {"mtu": "9100", "speed": "100000"}},
             "WRED_PROFILE": {"AZURE_LOSSLESS": {"green_min_threshold": "250000"}}}
    running = {"PORT": {"Ethernet8": {"mtu": "1500", "speed": "100000"}},
               "WRED_PROFILE": {"AZURE_LOSSLESS": {"green_min_threshold": "250000"},
                                "ECNTUNE_CANARY": {"green_min_threshold": "200000"}},
               "VLAN": {"Vlan20": {"vlanid": "20"}}}
    ours = {("WRED_PROFILE", "ECNTUNE_CANARY")}
    assert unsaved_changes(running, saved, ours) == [
        "PORT|Ethernet8: mtu 9100 -> 1500", "VLAN|Vlan20: added"]
    assert unsaved_changes(saved, running, ours) == [
        "PORT|Ethernet8: mtu 1500 -> 9100", "VLAN|Vlan20: removed"]
    assert unsaved_changes(running, running, set()) == []


@pytest.mark.ssh
def test_sonic_save_refuses_other_peoples_unsaved_changes(emulated_cluster: EmulatedCluster,
                                                          ) -> None:
    """`config save` saves all of the running CONFIG_DB: with someone's unsaved MTU change on
    the switch, promote --persist refuses and the saved file keeps the factory profile."""
    emu = emulated_cluster
    emu.edit_state("leaf0", lambda s: s["config_db"].setdefault("PORT", {}).setdefault(
        "Ethernet8", {}).update(mtu="1500"))
    with Fleet(load_inventory(emu.inventory_path)) as fleet:
        drv = fleet.driver("leaf0")
        drv.read()
        drv.write(WIN_ECN)
        plan = persistence_for(drv)
        with pytest.raises(ApplyError, match=r"leaf0: .*not ecntune's: PORT\|Ethernet8: "
                                             r"mtu 9100 -> 1500\. `config save` would persist "
                                             r"them too"):
            persist(plan, WIN_ECN)
        assert read_persistent(plan) == EcnSettings()  # nothing was saved
        emu.edit_state("leaf0", lambda s: s["config_db"]["PORT"]["Ethernet8"].update(mtu="9100"))
        assert persist(plan, WIN_ECN) == WIN_ECN  # only ours differs now
