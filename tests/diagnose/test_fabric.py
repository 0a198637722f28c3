"""Fabric checks of ``ecntune diagnose`` (#23): the pure functions over counters and flows, and
the simulator edge on planted faults (ECMP collision, foreign DSCP, pause without RoCE load)
and on clean fabrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rocesim import Background, Collective, Fabric, Topology, Workload, simulate
from tuner.cluster.sim import SimCluster
from tuner.diagnose.fabric import (
    FlowPath,
    check,
    dscp_findings,
    ecmp_findings,
    pause_findings,
    random_hash_tail,
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


def _equal_flows(counts: dict[str, int]) -> list[FlowPath]:
    """``n`` flows of 1 byte on each link, from host{link's index}, each from its own port."""
    links = [link for link, n in counts.items() for _ in range(n)]
    return [FlowPath(f"host{list(counts).index(link)}/mlx5_0", f"host{4 + i % 4}/mlx5_0",
                     50000 + i, link, 1.0) for i, link in enumerate(links)]


def test_hot_uplink_carries_half_again_the_median_and_is_improbable() -> None:
    # 3 uplinks, 3400 one-byte flows: 1500 on one link is 13 standard deviations off random
    # hashing; median 1000, so 1500 is exactly +50 % (hot) and 1490 is not (too small to
    # dominate, however improbable)
    flows = _equal_flows({"leaf0/Ethernet16": 1500, "leaf0/Ethernet20": 1000,
                          "leaf0/Ethernet24": 900})
    hot = ecmp_findings({"leaf0/Ethernet16": 1500, "leaf0/Ethernet20": 1000,
                         "leaf0/Ethernet24": 900}, flows, "test")
    assert [f.where for f in hot] == ["leaf0"] and hot[0].dominant
    assert "leaf0/Ethernet16 (+50%)" in hot[0].evidence
    assert "host0/mlx5_0:50000 -> host4/mlx5_0:4791 udp" in hot[0].evidence
    assert "NCCL_IB_QPS_PER_CONNECTION" in hot[0].action
    assert "host1/mlx5_0" not in hot[0].evidence  # a flow on a cold link is not named
    assert "share UDP source port" not in hot[0].evidence  # each flow has its own
    assert ecmp_findings({"leaf0/Ethernet16": 1490, "leaf0/Ethernet20": 1000,
                          "leaf0/Ethernet24": 900}, flows, "test") == []
    # no traffic, or one uplink (no choice to make), or no flows to judge by: no finding
    assert ecmp_findings({"leaf0/Ethernet16": 0, "leaf0/Ethernet20": 0}, [], "t") == []
    assert ecmp_findings({"leaf0/Ethernet16": 5}, [], "t") == []
    assert ecmp_findings({"leaf0/Ethernet16": 150, "leaf0/Ethernet20": 0}, [], "t") == []


def test_random_hash_tail_bounds_the_exact_binomial_tail() -> None:
    # equal flows: one link's load is Binomial(n, 1/k); the bound is >= the union of exact
    # tails and exact when every flow is on one link (k^(1-n))
    from scipy.stats import binom

    for n, k, m in [(16, 2, 13), (16, 4, 9), (64, 4, 28), (340, 3, 150)]:
        exact = k * binom.sf(m - 1, n, 1 / k)
        assert exact <= random_hash_tail([1.0] * n, k, m) <= 10 * exact, (n, k, m)
    assert random_hash_tail([2.0] * 16, 2, 32) == pytest.approx(2.0 ** -15)
    assert random_hash_tail([5.0, 1.0, 1.0], 2, 5.0) == 1.0  # the elephant lands somewhere
    assert random_hash_tail([1.0] * 8, 4, 2.0) == 1.0  # at or below the mean: no evidence


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
