"""Maintenance windows: promote changes a switch the inventory marks `promote_in_maintenance`
only while it is out of production, as each platform reports it (tuner.lifecycle.maintenance).
The parser samples are the vendors' own; the emulated test promotes over real sshd."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from safety.journal import Journal
from safety.limits import SafetyLimits
from tuner.emulated import EmulatedCluster
from tuner.inventory import load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.lifecycle.maintenance import mode
from tuner.lifecycle.promote import promote_waves
from tuner.lifecycle.promoted import PromotedRecord
from tuner.lifecycle.waves import parse_waves, plan_waves
from tuner.settings import EcnSettings

# NVUE reference, Show Commands / System: `nv show maintenance` (Cumulus Linux 5.13+), with
# the trailing spaces it prints.
NV_SHOW_MAINTENANCE = "".join(line + "\n" for line in (
    "Maintenance Info ",
    "============== ",
    "Unit                                 State ",
    "-----------------------              --------------- ",
    "all-protocols                        maintenance ",
    "all-interfaces                       maintenance "))
# Cumulus Linux user guide, Maintenance Mode: `sudo csmgrctl -s` (5.12 and earlier).
CSMGRCTL = "".join(line + "\n" for line in (
    "Current System Mode: Maintenance since Tue Jan  5 00:13:37 2021 (Duration: 00:00:31)",
    " Boot Mode: reboot_cold  ",
    " 2 registered modules",
    " frr     : Maintenance, down",
    " switchd : Maintenance, down "))


def test_each_platform_says_maintenance_its_own_way() -> None:
    # SONiC TSC: the lines sonic-mgmt's tests/bgp/test_traffic_shift.py matches
    assert mode("sonic", "System Mode: Maintenance\n") == "Maintenance"
    assert mode("sonic", "System Mode: Normal\n") == "Normal"
    assert mode("sonic", "System Mode: Not consistent\n") == "Not consistent"
    # multi-ASIC: one line per BGP instance; one not in maintenance is enough to refuse
    assert mode("sonic", "BGP0 : System Mode: Maintenance\n"
                         "BGP1 : System Mode: Normal\n") == "Normal"
    assert mode("sonic", "BGP0 : System Mode: Maintenance\n"
                         "BGP1 : System Mode: Maintenance\n") == "Maintenance"
    assert mode("nvue", NV_SHOW_MAINTENANCE) == "maintenance"
    assert mode("nvue", NV_SHOW_MAINTENANCE.replace("all-protocols                        "
                                                    "maintenance",
                                                    "all-protocols                        "
                                                    "production")) == "production"
    assert mode("nvue", CSMGRCTL) == "Maintenance"
    assert mode("sonic", "Root privileges required for this operation\n") is None
    assert mode("nvue", "Error: Invalid Command: nv show maintenance\n") is None


WINNER = {"kmin_bytes": 200_000, "kmax_bytes": 800_000, "pmax_percent": 20}


@pytest.mark.ssh
def test_promote_waits_for_the_switches_marked_for_maintenance(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster
    inv = yaml.safe_load(emu.inventory_path.read_text())
    for sw in inv["switches"]:
        sw["promote_in_maintenance"] = True
    inv["groups"] = {"pod1": list(emu.switch_names)}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    journal = Journal(tmp_path / "journal.jsonl")
    record = PromotedRecord(tmp_path / "promoted.jsonl")
    with Fleet(load_inventory(path), "pod1") as fleet:
        [sonic] = [s.name for s in fleet.switches if s.platform == "sonic"]
        [nvue] = [s.name for s in fleet.switches if s.platform == "nvue"]
        waves = plan_waves(fleet.keys, [sonic], parse_waves("canary,100"))
        before, _ = fleet.read_settings()

        def promote() -> list[str]:
            res = promote_waves(fleet, waves, WINNER, study="s", limits=SafetyLimits(),
                                gate_s=0.2, journal=journal, record=record)
            return [r.outcome for r in res]

        # Both in production: the first wave is refused, nothing is touched.
        assert promote() == ["refused:not_in_maintenance"]
        assert fleet.read_settings()[0] == before and journal.entries() == []
        # The SONiC switch shifted away (TSA): its wave goes, the NVUE one is refused.
        fleet.pool[sonic].run("TSA")
        assert promote() == ["promoted", "refused:not_in_maintenance"]
        now, _ = fleet.read_settings()
        assert now.switches[sonic] == EcnSettings(**WINNER)
        assert now.switches[nvue] == before.switches[nvue]
        # The NVUE switch in maintenance mode too: the group is done.
        fleet.pool[nvue].run("nv set maintenance unit all-protocols mode enabled && "
                             "nv config apply -y")
        assert promote() == ["unchanged", "promoted"]
        assert fleet.read_settings()[0].switches[nvue] == EcnSettings(**WINNER)
