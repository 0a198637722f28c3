"""``congestion_points``: which congestion points the canary crosses, and a warning for every
tuned object its traffic never reaches (pure layouts, then the simulated fabric end to end)."""

from __future__ import annotations

import pytest

from safety.coverage import CanaryLayout, PartPlacement, Tuned, check_coverage, crossed
from tuner.cli.preflight import check
from tuner.cluster import build_cluster
from tuner.experiment import parse_experiment

UP = Tuned(target="leaf0", point="leaf_uplink", what="ECN on queue 3 of Ethernet16")
DOWN = Tuned(target="leaf0", point="leaf_downlink", what="ECN on queue 3 of Ethernet0")


def layout(nic_leaf: dict[str, str | None], tuned: list[Tuned], **kw: object) -> CanaryLayout:
    return CanaryLayout(source="test", nic_leaf=nic_leaf, tuned=tuned,
                        parts=[PartPlacement(name="parts[0] collective",
                                             nics=list(nic_leaf))], **kw)  # type: ignore[arg-type]


def warned(rows: list) -> dict[str, str]:
    return {r.target: r.evidence for r in rows if r.status == "warn"}


def test_one_leaf_canary_never_exercises_the_uplinks_it_tunes() -> None:
    rows = check_coverage(layout({"h0/mlx5_0": "leaf0", "h1/mlx5_0": "leaf0"}, [DOWN, UP]))
    assert rows[0].status == "pass" and "downlinks towards hosts on leaf0" in rows[0].evidence
    assert "uplinks" not in rows[0].evidence
    assert list(warned(rows)) == ["leaf0"]
    assert "never leaves that leaf" in warned(rows)["leaf0"]
    assert "Ethernet16 (uplinks)" in warned(rows)["leaf0"]


def test_a_canary_across_two_leaves_crosses_uplinks_and_spines() -> None:
    spine = Tuned(target="spine0", point="spine_downlink", what="ECN on queue 3 of Ethernet0")
    rows = check_coverage(layout({"h0/mlx5_0": "leaf0", "h1/mlx5_0": "leaf1"},
                                 [DOWN, UP, spine]))
    assert warned(rows) == {}
    assert "uplinks on leaf0, leaf1" in rows[0].evidence
    assert "spine downlinks" in rows[0].evidence


def test_a_tuned_switch_without_canary_flows_is_named() -> None:
    other = Tuned(target="leaf3", point="leaf_downlink", what="ECN on queue 3 of Ethernet0")
    rows = check_coverage(layout({"h0/mlx5_0": "leaf0", "h1/mlx5_0": "leaf0"}, [DOWN, other]))
    assert list(warned(rows)) == ["leaf3"]
    assert "carries none of the canary's flows" in warned(rows)["leaf3"]


def test_rails_on_their_own_leaves_never_cross_the_spines() -> None:
    # rail-optimised: rail 0 of both hosts under leaf0, rail 1 under leaf1; NCCL keeps rail k
    # on rail k, so two leaves are in the canary yet no traffic leaves either
    nics = {"h0/mlx5_0": "leaf0", "h1/mlx5_0": "leaf0", "h0/mlx5_1": "leaf1",
            "h1/mlx5_1": "leaf1"}
    rails = {n: int(n[-1]) for n in nics}
    lay = layout(nics, [DOWN, UP], nic_rail=rails)
    assert ("leaf_uplink", "leaf0") not in crossed(lay)
    assert "no part of the workload spans two leaves" in warned(check_coverage(lay))["leaf0"]
    # without the rails the same hosts would cross
    assert ("leaf_uplink", "leaf0") in crossed(layout(nics, [DOWN, UP]))


def test_an_unplaced_host_is_one_warning_not_a_guess() -> None:
    rows = check_coverage(layout({"h0/mlx5_0": "leaf0", "h1/mlx5_0": None}, [DOWN, UP]))
    assert [(r.target, r.status) for r in rows] == [("canary", "warn")]
    assert "h1/mlx5_0" in rows[0].evidence and "hosts[].leaf" in rows[0].evidence
    nic_only = [Tuned(target="h0/mlx5_0", point="nic_egress", what="DCQCN")]
    assert warned(check_coverage(layout({"h0/mlx5_0": "leaf0", "h1/mlx5_0": None},
                                        nic_only))) == {}


SIM = """
name: cover
canary: {{switches: {switches}}}
workload: {{parts: [{{kind: collective, op: all_reduce, size_bytes: 1048576}},
                    {{kind: probe, pairs: 2}}]}}
search: {{knobs: {knobs}}}
preflight: {{error_sample_s: 0}}
tracking: {{enabled: false}}
"""
ECN = "{kmin_bytes: {low: 10000, high: 100000}}"


@pytest.mark.parametrize(("switches", "knobs", "warns"), [
    (["leaf0"], ECN, ["leaf0"]),  # one leaf: its uplinks' ECN is never exercised
    (["leaf0", "leaf1"], ECN, []),  # two leaves: every tuned port is on the canary's path
    (["leaf0"], "{rpg_time_reset: {low: 2, high: 100}}", []),  # only DCQCN is tuned
])
def test_simulated_canary(switches: list[str], knobs: str, warns: list[str]) -> None:
    exp = parse_experiment(SIM.format(switches=switches, knobs=knobs))
    with build_cluster(exp) as cluster:
        rows = [r for r in check(exp, cluster) if r.check == "congestion_points"]
    assert sorted(warned(rows)) == warns
    assert rows[0].target == "canary" and "from the rocesim topology" in rows[0].evidence
    if warns:
        assert "ECN on TC 3 of Ethernet16, Ethernet20 (uplinks)" in warned(rows)["leaf0"]


INV: dict = {
    "hosts": [{"name": f"h{i}", "address": f"10.0.0.{i + 1}", "netdev": "eth0",
               "rdma_device": "mlx5_0", "pci": "0000:3b:00.0", "nic_gbps": 100,
               "leaf": "leaf0"} for i in range(2)],
    "switches": [{"name": "leaf0", "address": "10.0.1.1", "platform": "sonic",
                  "canary_ports": ["Ethernet0", "Ethernet4", "Ethernet32"],
                  "uplink_ports": ["Ethernet32"]}],
    "launcher": {"host": "h0"},
}


def test_ssh_layout_reads_the_inventory() -> None:
    from tuner.canary_layout import ssh_layout
    from tuner.inventory import parse_inventory

    exp = parse_experiment(SIM.format(switches=["leaf0"], knobs=ECN))
    lay = ssh_layout(exp, parse_inventory(INV))
    assert lay.nic_leaf == {"h0/mlx5_0": "leaf0", "h1/mlx5_0": "leaf0"}
    assert [(t.target, t.point) for t in lay.tuned] == [("leaf0", "leaf_downlink"),
                                                       ("leaf0", "leaf_uplink")]
    assert "of Ethernet32" in warned(check_coverage(lay))["leaf0"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["switches"][0].update(role="spine"), "uplink_ports: a spine's canary ports"),
    (lambda d: d["switches"].append({"name": "sp0", "address": "10.0.1.2", "platform": "sonic",
                                     "role": "spine", "canary_ports": ["Ethernet0"]})
     or d["hosts"][1].update(leaf="sp0"), "host h1: leaf 'sp0' is a switch with role spine"),
    (lambda d: d["hosts"][0].update(leaf="leaf0;reboot"),
     "hosts[0] (h0).leaf: 'leaf0;reboot' does not match"),
])
def test_bad_placement_in_the_inventory_is_named(change, message: str) -> None:
    import copy

    from tuner.errors import ConfigError
    from tuner.inventory import parse_inventory

    data = copy.deepcopy(INV)
    change(data)
    with pytest.raises(ConfigError) as err:
        parse_inventory(data)
    assert message in str(err.value)
