"""Fabric checks of ``ecntune diagnose`` (#23): the pure functions over counters and flows, and
the simulator edge on planted faults (ECMP collision, foreign DSCP, pause without RoCE load)
and on clean fabrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rocesim import Background, Collective, Fabric, Topology, Workload, simulate
from tuner.cluster.sim import SimCluster
from tuner.diagnose.fabric import (
    FlowPath,
    check,
    dscp_findings,
    ecmp_findings,
    pause_findings,
    sim_findings,
)
from tuner.experiment import Experiment, parse_experiment

ROOT = Path(__file__).resolve().parents[2]


def _exp(name: str, **fabric: Any) -> Experiment:
    data = yaml.safe_load((ROOT / "experiments" / name).read_text())
    data["fabric"].update(fabric)
    return parse_experiment(yaml.safe_dump(data), name)


def _sim(exp: Experiment) -> SimCluster:
    return SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current), name=exp.name)


def test_hot_uplink_is_one_carrying_half_again_the_median() -> None:
    flows = [FlowPath("host0/mlx5_0", "host4/mlx5_0", 50000, "leaf0/Ethernet16", 3e6),
             FlowPath("host1/mlx5_0", "host5/mlx5_0", 50001, "leaf0/Ethernet20", 1e6)]
    # 3 uplinks: median 100; 150 is exactly +50 % (hot), 149 is not
    hot = ecmp_findings({"leaf0/Ethernet16": 150, "leaf0/Ethernet20": 100,
                         "leaf0/Ethernet24": 90}, flows, "test")
    assert [f.where for f in hot] == ["leaf0"] and hot[0].dominant
    assert "leaf0/Ethernet16 (+50%)" in hot[0].evidence
    assert "host0/mlx5_0:50000 -> host4/mlx5_0:4791 udp" in hot[0].evidence
    assert "host1/mlx5_0" not in hot[0].evidence  # a flow on a cold link is not named
    assert "NCCL_IB_QPS_PER_CONNECTION" in hot[0].action
    assert ecmp_findings({"leaf0/Ethernet16": 149, "leaf0/Ethernet20": 100,
                          "leaf0/Ethernet24": 90}, flows, "test") == []
    # no traffic, or one uplink (no choice to make): nothing to judge
    assert ecmp_findings({"leaf0/Ethernet16": 0, "leaf0/Ethernet20": 0}, [], "t") == []
    assert ecmp_findings({"leaf0/Ethernet16": 5}, [], "t") == []


def test_foreign_dscp_and_pause_without_roce_are_named() -> None:
    got = dscp_findings({"leaf1/Ethernet0": {26: 1e6, 10: 2e5}, "leaf1/Ethernet4": {26: 1e6}},
                        "test")
    assert [f.where for f in got] == ["leaf1/Ethernet0"]
    assert "DSCP 10: 200000 B" in got[0].evidence and "DSCP_TO_TC_MAP" in got[0].action
    paused = pause_findings({"host4/mlx5_0": 12, "host0/mlx5_0": 3, "host1/mlx5_0": 0},
                            {"host0/mlx5_0": 5e5}, "test")
    assert [f.where for f in paused] == ["host4/mlx5_0"]
    assert "12 PFC pause frames" in paused[0].evidence


def test_planted_ecmp_collision_is_found_on_the_simulator() -> None:
    exp = _exp("ecmp-collision.yaml")
    findings, not_checked = check(_sim(exp), exp)
    assert not_checked == []
    assert {f.where for f in findings} == {"leaf0", "leaf1"}
    assert all(f.check == "ecmp_balance" and f.dominant for f in findings)
    leaf0 = next(f for f in findings if f.where == "leaf0")
    # every cross-leaf flow of leaf0 (4 x 4 peer pairs) on one uplink, the other idle
    assert "16 flows hashed onto the hot link(s)" in leaf0.evidence
    assert ":49152 -> " in leaf0.evidence and "(+100%)" in leaf0.evidence


def test_clean_fabrics_give_no_finding() -> None:
    for exp in (_exp("ecmp-collision-fixed.yaml"), _exp("quick.yaml")):
        assert check(_sim(exp), exp) == ([], [])


def test_foreign_dscp_tenant_is_found_in_the_roce_queue(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "experiments" / "ecmp-collision-fixed.yaml").read_text())
    data["workload"]["parts"].append({"kind": "background", "pattern": "incast", "load": 0.5,
                                      "fan_in": 3, "priority": "roce", "dscp": 10})
    exp = parse_experiment(yaml.safe_dump(data), "dscp.yaml")
    findings, _ = check(_sim(exp), exp)
    assert findings and {f.check for f in findings} == {"roce_queue_dscp"}
    assert all("DSCP 10:" in f.evidence and not f.dominant for f in findings)


def test_pause_on_a_port_without_roce_load_is_found() -> None:
    # leaf1's NICs run only a tenant marked DSCP 10 in the RoCE priority, an incast that
    # pauses its senders; leaf0's NICs run the RoCE AlltoAll
    fab = Fabric(Topology(leaves=2, spines=2, hosts_per_leaf=4, buffer_bytes=2**21))
    ranks = fab.hosts_under("leaf0")
    wl = Workload(collectives=[Collective("alltoall", 2**20, ranks, iterations=1)],
                  background=[Background("incast", 1.0, 3, nics=fab.hosts_under("leaf1"),
                                         priority="roce", dscp=10)])
    res = simulate(fab, wl, seed=1)
    found = sim_findings(res, [ln.src_port for ln in fab.links], fab.nic_names, "test")
    paused = {f.where for f in found if f.check == "pause_without_roce"}
    assert paused and paused <= set(fab.hosts_under("leaf1")[1:]), found


class _Remote:
    """A backend that is not the simulator (SSH): only ``describe()`` is read."""

    def describe(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(canary_switches=["leaf0"])


def test_without_uplinks_in_the_inventory_the_balance_is_not_checked() -> None:
    findings, not_checked = check(_Remote(), _exp("quick.yaml"))  # type: ignore[arg-type]
    assert findings == []
    ecmp = next(n for n in not_checked if n.check == "ecmp_balance")
    assert "does not say which switch ports are uplinks" in ecmp.reason
    assert {n.check for n in not_checked} == {"ecmp_balance", "roce_queue_dscp",
                                              "pause_without_roce"}
