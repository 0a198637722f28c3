"""``ecntune verify`` on the emulated cluster (real sshd per target): settings are put on every
target through the drivers and recorded as promoted; an operator then changes one host and one
switch by hand over SSH, and verify names exactly those values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.emulated.helpers import run
from tuner.cli import main
from tuner.emulated import EmulatedCluster
from tuner.emulated.hosts import knob_relpaths
from tuner.inventory import load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.lifecycle.promoted import PromotedRecord, entry_for
from tuner.settings import DcqcnSettings, EcnSettings

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(180)]

WINNER_ECN = EcnSettings(kmin_bytes=200_000, kmax_bytes=800_000, pmax_percent=20)
WINNER_DCQCN = DcqcnSettings(rpg_time_reset=150, rpg_ai_rate=40, min_time_between_cnps=4)


def grouped_inventory(emu: EmulatedCluster, tmp_path: Path) -> Path:
    inv = yaml.safe_load(emu.inventory_path.read_text())
    inv["groups"] = {"pod1": [*emu.switch_names, *emu.host_names]}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


def promote_by_drivers(inv_path: Path, results: Path) -> None:
    """What a promotion leaves behind: devices written (and read back) plus record lines."""
    with Fleet(load_inventory(inv_path), "pod1") as fleet:
        wanted = {k: (WINNER_DCQCN if fleet.is_nic(k) else WINNER_ECN) for k in fleet.keys}
        res = fleet.fan(lambda d: d.write(wanted[d.target]))
        assert all(o.error is None for o in res.values()), res
    PromotedRecord(results / "promoted.jsonl").append([
        entry_for(k, v, event="promoted", study="moe-mix-7", group="pod1", wave=1)
        for k, v in wanted.items()])


def test_verify_finds_a_hand_made_drift(emulated_cluster: EmulatedCluster,
                                        tmp_path: Path) -> None:
    emu = emulated_cluster
    inv = grouped_inventory(emu, tmp_path)
    results = tmp_path / "results"
    promote_by_drivers(inv, results)
    args = ["verify", "pod1", "--inventory", str(inv), "--record",
            str(results / "promoted.jsonl")]

    clean = CliRunner().invoke(main, args)
    assert clean.exit_code == 0, clean.output
    assert "6 target(s) read" in clean.output and "OK: every checked target" in clean.output

    # By hand: an operator logs in to host2 and leaf0 and changes one value on each.
    state = emu.state("host2")
    knob_file = emu.target_dir("host2") / knob_relpaths(state)["rpg_time_reset"]
    rc, _, err = run(emu, "host2", f"echo 300 > {knob_file}")
    assert rc == 0, err
    # the canary ports use the driver's own WRED profile (tuner/drivers/sonic.py)
    rc, _, err = run(emu, "leaf0", "ecnconfig -p ECNTUNE_CANARY -gmin 150000")
    assert rc == 0, err

    drifted = CliRunner().invoke(main, args)
    assert drifted.exit_code == 5, drifted.output
    lines = [ln.split() for ln in drifted.output.splitlines() if ln.startswith("  ")]
    assert [ln[:6] for ln in lines] == [
        ["host2/mlx5_0", "rpg_time_reset", "live", "300", "expected", "150"],
        ["leaf0", "kmin_bytes", "live", "150000", "expected", "200000"]]
    assert all("by study moe-mix-7" in " ".join(ln) for ln in lines)
    assert drifted.output.strip().splitlines()[-1] == (
        "ecntune verify: DRIFT: 2 value(s) on 2 target(s) differ from what was promoted: "
        "host2/mlx5_0, leaf0")


def test_unknown_group_is_bad_input(emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    inv = grouped_inventory(emulated_cluster, tmp_path)
    res = CliRunner().invoke(main, ["verify", "pod9", "--inventory", str(inv)])
    assert res.exit_code == 2
    assert "inventory group 'pod9' does not exist (groups: pod1" in res.output
