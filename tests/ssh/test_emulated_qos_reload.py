"""``qos_reload``: pre-flight renders the SONiC switch's own qos.json.j2 read-only and warns what
``config qos reload`` / ``config load_minigraph`` would undo on the canary (pure comparison,
then the emulated SONiC switch over real sshd)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from safety.preflight import PreflightSpec, run_checks
from tuner.cluster.ssh import SshCluster
from tuner.drivers._sonic_reload import reload_losses, render_command, template_path
from tuner.emulated import switches as swmod
from tuner.emulated.cluster import EmulatedCluster
from tuner.inventory import parse_inventory
from tuner.preflight_facts import ssh_facts

SPEC = PreflightSpec(error_sample_s=0, df_ping=False)
PORTS = ["Ethernet0", "Ethernet4"]
STOCK = swmod.qos_template_render(1048576, 2097152, 5, [*PORTS, "Ethernet8"], 3)


def losses(running: dict[str, Any], rendered: dict[str, Any] = STOCK) -> list[str]:
    return reload_losses(running, rendered, profile="ECNTUNE_CANARY", original="AZURE_LOSSLESS",
                         ports=PORTS, queue=3, dscp=26)


def canary_bound(db: dict[str, Any]) -> dict[str, Any]:
    """``db`` as a trial leaves it: the canary profile bound, RoCE's DSCP 26 in TC 3."""
    db = copy.deepcopy(db)
    db["WRED_PROFILE"]["ECNTUNE_CANARY"] = dict(db["WRED_PROFILE"]["AZURE_LOSSLESS"])
    for p in PORTS:
        db["QUEUE"][f"{p}|3"]["wred_profile"] = "ECNTUNE_CANARY"
    swmod.operator_qos_fix(db)
    return db


def test_a_stock_template_drops_the_canary_profile_and_the_dscp_fix() -> None:
    assert losses(canary_bound(STOCK)) == [
        "WRED_PROFILE|ECNTUNE_CANARY is not generated, so it is deleted (it exists now)",
        "queue 3 of Ethernet0, Ethernet4 is bound to AZURE_LOSSLESS again",
        "DSCP 26 on Ethernet0, Ethernet4: TC 3 (AZURE), queue 3, pfc_enable 3,4 now, "
        "TC 1 (AZURE), queue 1, pfc_enable 3,4 after"]


def test_a_template_that_makes_the_canary_loses_nothing() -> None:
    site = canary_bound(STOCK)
    fixed = copy.deepcopy(STOCK)
    swmod.operator_qos_fix(fixed)
    assert losses(fixed, site) == []  # before a study: the trials' profile is regenerated too
    assert losses(canary_bound(STOCK), site) == []


def test_thresholds_moved_on_the_original_profile_come_back() -> None:
    db = copy.deepcopy(STOCK)
    db["WRED_PROFILE"]["AZURE_LOSSLESS"]["green_min_threshold"] = "150000"
    assert "AZURE_LOSSLESS comes back with green_min_threshold 150000 -> 1048576" in losses(db)


def test_older_template_forms_are_followed() -> None:
    # older qos_config.j2: one QUEUE key for several ports and queues, bracketed references
    old = copy.deepcopy(STOCK)
    old["QUEUE"] = {"Ethernet0,Ethernet4|3-4": {"wred_profile": "[WRED_PROFILE|AZURE_LOSSLESS]"}}
    assert "queue 3 of Ethernet0, Ethernet4 is bound to AZURE_LOSSLESS again" in losses(
        canary_bound(STOCK), old)


def test_the_template_comes_from_device_metadata_and_is_rendered_to_stdout() -> None:
    db = {"DEVICE_METADATA": {"localhost": {"platform": swmod.SONIC_PLATFORM,
                                            "hwsku": swmod.SONIC_HWSKU}}}
    path = template_path(db)
    assert path == "/usr/share/sonic/device/x86_64-mlnx_msn2700-r0/ACS-MSN2700/qos.json.j2"
    # no ",config-db" and no --write-to-db: sonic-cfggen prints the render and writes nothing
    assert render_command(path) == (f"sonic-cfggen -d -t {path} -y /etc/sonic/sonic_version.yml")
    assert template_path({"DEVICE_METADATA": {"localhost": {"platform": "x"}}}) is None


@pytest.fixture
def emu(emulated_cluster: EmulatedCluster) -> Iterator[EmulatedCluster]:
    yield emulated_cluster
    emulated_cluster.reset()


def reload_rows(emu: EmulatedCluster) -> dict[str, tuple[str, str]]:
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    data["hosts"] = data["hosts"][:1]
    data["switches"] = [s for s in data["switches"] if s["platform"] == "sonic"]
    with SshCluster(parse_inventory(data, str(emu.inventory_path))) as c:
        return {r.target: (r.status, r.evidence) for r in run_checks(ssh_facts(c, SPEC), SPEC)
                if r.check == "qos_reload"}


@pytest.mark.ssh
def test_emulated_sonic_switch_warns_what_a_reload_would_undo(emu: EmulatedCluster) -> None:
    rows = reload_rows(emu)
    status, why = rows["leaf0"]
    assert status == "warn"
    assert "rewrite the QoS tables from /usr/share/sonic/device/x86_64-mlnx_msn2700-r0/" \
           "ACS-MSN2700/qos.json.j2" in why
    assert "WRED_PROFILE|ECNTUNE_CANARY is not generated, so it is deleted (trials create it)" \
        in why
    assert "DSCP 26 on Ethernet0, Ethernet4: TC 3 (AZURE), queue 3, pfc_enable 3,4 now, " \
           "TC 1 (AZURE), queue 1, pfc_enable 3,4 after" in why  # the operator's fix is lost
    assert "golden_config_db.json" in why and "--override_config" in why


@pytest.mark.ssh
def test_emulated_sonic_switch_whose_template_makes_the_canary_passes(
        emu: EmulatedCluster) -> None:
    def site_template(s: dict[str, Any]) -> None:  # the site put the canary in its template
        tpl = s["qos_template"]
        tpl["WRED_PROFILE"]["ECNTUNE_CANARY"] = dict(tpl["WRED_PROFILE"]["AZURE_LOSSLESS"])
        for p in s["host_ports"]:
            tpl["QUEUE"][f"{p}|3"]["wred_profile"] = "ECNTUNE_CANARY"
        swmod.operator_qos_fix(tpl)

    emu.edit_state("leaf0", site_template)
    status, why = reload_rows(emu)["leaf0"]
    assert status == "pass" and "regenerates ECNTUNE_CANARY" in why


@pytest.mark.ssh
def test_emulated_sonic_switch_without_its_template_warns_unknown(emu: EmulatedCluster) -> None:
    def other_hwsku(s: dict[str, Any]) -> None:  # CONFIG_DB names an HWSKU with no directory
        s["config_db"]["DEVICE_METADATA"]["localhost"]["hwsku"] = "Mellanox-SN2700-D48C8"

    emu.edit_state("leaf0", other_hwsku)
    status, why = reload_rows(emu)["leaf0"]
    assert status == "warn" and "TemplateNotFound: qos.json.j2" in why
    assert "is not known" in why and "_clear_qos" in why
