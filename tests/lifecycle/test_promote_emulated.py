"""Promotion in waves on the emulated cluster (real sshd, dead-man timers, journal): a PFC storm
injected on host2 makes the wave holding host2 roll back (earlier waves stay); with the fault
cleared a second promotion finishes the group and persists it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from safety.journal import Journal
from safety.limits import SafetyLimits
from tuner.emulated import EmulatedCluster
from tuner.inventory import load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.lifecycle.persist import persistence_for, read_persistent
from tuner.lifecycle.promote import plan_target, promote_waves, render_plan
from tuner.lifecycle.promoted import PromotedRecord
from tuner.lifecycle.verify import verify_group
from tuner.lifecycle.waves import parse_waves, plan_waves
from tuner.settings import DcqcnSettings, EcnSettings

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(240)]  # ~25 s

WINNER = {"kmin_bytes": 200_000, "kmax_bytes": 800_000, "pmax_percent": 20,
          "rpg_time_reset": 150, "rpg_ai_rate": 40, "min_time_between_cnps": 4}
CANARY = ["leaf0", "host0/mlx5_0"]


def _fleet(emu: EmulatedCluster, tmp_path: Path) -> Fleet:
    inv = yaml.safe_load(emu.inventory_path.read_text())
    inv["groups"] = {"pod1": [*emu.switch_names, *emu.host_names]}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return Fleet(load_inventory(path), "pod1")


def test_waves_roll_back_on_a_violation_then_finish_with_persist(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster
    journal = Journal(tmp_path / "journal.jsonl")
    record = PromotedRecord(tmp_path / "promoted.jsonl")
    limits = SafetyLimits(deadman_timeout_s=30)
    with _fleet(emu, tmp_path) as fleet:
        waves = plan_waves(fleet.keys, CANARY, parse_waves("canary,10,50,100"))
        assert [(w.name, w.targets) for w in waves] == [
            ("canary", ("leaf0", "host0/mlx5_0")), ("50%", ("leaf1",)),
            ("100%", ("host1/mlx5_0", "host2/mlx5_0", "host3/mlx5_0"))]

        # Dry run: the exact single command per target, and its rollback.
        live, _ = fleet.read_settings()
        plans = {k: plan_target(fleet.driver(k), v, WINNER, "boot-unit")
                 for k, v in {**live.switches, **live.nics}.items()}
        text = "\n".join(render_plan(waves, plans))
        assert "ecnconfig -p ECNTUNE_CANARY -gmax 800000" in text  # leaf0: canary profile
        assert "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3" in text
        assert "printf '%s\\n' 150 > roce_rp/rpg_time_reset" in text  # OFED sysfs host
        assert "printf '%s\\n' 150 > rp_time_reset" in text  # debugfs host
        assert text.count("rollback: ") == 6 and "persist:  config save -y" in text
        assert fleet.read_settings()[0] == live  # the dry run changed nothing

        emu.inject("host2", pfc_storm=20000)  # 20 000 frames/s of 50 us: paused all the time
        first = promote_waves(fleet, waves, WINNER, study="moe-1", limits=limits,
                              gate_s=1.0, journal=journal, record=record)
        assert [r.outcome for r in first] == ["promoted", "promoted", "rolled_back:pfc_storm"]
        assert "host2/mlx5_0" in first[-1].detail
        now, _ = fleet.read_settings()
        held = {**now.switches, **now.nics}
        win_ecn = EcnSettings(kmin_bytes=200_000, kmax_bytes=800_000, pmax_percent=20)
        win_nic = DcqcnSettings(rpg_time_reset=150, rpg_ai_rate=40, min_time_between_cnps=4)
        assert held["leaf0"] == held["leaf1"] == win_ecn
        assert held["host0/mlx5_0"] == win_nic
        assert held["host1/mlx5_0"] == held["host2/mlx5_0"] == DcqcnSettings()  # rolled back
        assert [e.outcomes for e in journal.entries()] == [["kept"], ["kept"], ["restored"]]
        assert journal.dirty() is None
        report = verify_group(fleet, record.expected())  # the record matches the devices
        assert report.clean and len(report.checked) == 6

        emu.clear_faults("host2")
        second = promote_waves(fleet, waves, WINNER, study="moe-1", limits=limits,
                               gate_s=0.5, journal=journal, record=record,
                               persist="boot-unit")
        assert [r.outcome for r in second] == ["unchanged", "unchanged", "promoted"]
        assert all(r.persisted == sorted(r.wave.targets) for r in second)
        for k in fleet.keys:
            assert read_persistent(persistence_for(fleet.driver(k))) == (
                win_nic if fleet.is_nic(k) else win_ecn)
        assert verify_group(fleet, record.expected()).clean
        assert {e.persisted for e in record.expected().values()} == {True}

        # A hand-edited boot unit is drift of the boot-time source while the live state holds.
        unit = persistence_for(fleet.driver("host3/mlx5_0"))
        path = Path(unit.unit_path)  # type: ignore[attr-defined]
        path.write_text(path.read_text().replace("echo 40 ", "echo 5 "))
        report = verify_group(fleet, record.expected(), boot="boot-unit")
        assert [(d.target, d.knob, d.source, d.live, d.expected) for d in report.drift] == [
            ("host3/mlx5_0", "rpg_ai_rate", "boot", 5, 40)]


def test_a_killed_promotion_is_put_back_by_the_next(emulated_cluster: EmulatedCluster,
                                                    tmp_path: Path) -> None:
    """What a SIGKILL between apply and journal end leaves: an open entry, targets changed."""
    from tuner.lifecycle.promote import recover_open, wanted_settings

    journal = Journal(tmp_path / "promote-journal.jsonl")
    with _fleet(emulated_cluster, tmp_path) as fleet:
        part = fleet.cluster(["leaf1", "host3/mlx5_0"])
        before = part.snapshot()
        after = wanted_settings(before, WINNER)
        journal.begin("promote:moe-1", 2, after.targets(), before, after)
        part.apply(after)
        assert part.read_back() == after and journal.dirty() is not None
        closed = recover_open(fleet, journal)
        assert len(closed) == 1 and journal.dirty() is None
        assert part.read_back() == before
        assert journal.entries()[0].outcomes == ["restored:recover"]
