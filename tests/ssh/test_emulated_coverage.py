"""``congestion_points`` on the emulated cluster: the inventory it writes places every host
under its leaf and names the leaves' uplinks, so ``ecntune preflight`` says which congestion
points the canary crosses and warns when tuned uplinks are never reached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ssh.conftest import run_preflight
from tuner.emulated.cluster import EmulatedCluster

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def preflight(emu: EmulatedCluster, tmp_path: Path, hosts: list[str]) -> list[dict[str, Any]]:
    """Pre-flight of a canary of ``hosts`` and the SONiC leaf, its uplinks tuned too."""
    inv = yaml.safe_load(Path(emu.inventory_path).read_text())
    inv["hosts"] = [h for h in inv["hosts"] if h["name"] in hosts]
    inv["launcher"]["host"] = hosts[0]
    inv["switches"] = [s for s in inv["switches"] if s["platform"] == "sonic"]
    leaf = inv["switches"][0]
    leaf["canary_ports"] = leaf["canary_ports"] + leaf["uplink_ports"]
    _, rows = run_preflight(emu, tmp_path, inv, "emu-cover")
    return [r for r in rows if r["check"] == "congestion_points"]


def test_hosts_under_one_leaf_never_reach_its_tuned_uplinks(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster
    under = sorted(emu.state("leaf0")["hosts"])  # host0, host1
    rows = preflight(emu, tmp_path, under)
    assert [(r["target"], r["status"]) for r in rows] == [("canary", "pass"), ("leaf0", "warn")]
    assert "downlinks towards hosts on leaf0" in rows[0]["evidence"]
    uplinks = ", ".join(emu.state("leaf0")["uplink_ports"])
    assert f"ECN on queue 3 (ECNTUNE_CANARY) of {uplinks} (uplinks)" in rows[1]["evidence"]
    assert "every canary NIC sits under leaf0" in rows[1]["evidence"]


def test_hosts_under_both_leaves_cross_the_tuned_uplinks(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster
    rows = preflight(emu, tmp_path, emu.host_names)
    assert [(r["target"], r["status"]) for r in rows] == [("canary", "pass")]
    assert "uplinks on leaf0, leaf1" in rows[0]["evidence"]
