"""Faults rocesim can plant for ``ecntune diagnose`` (#23): an ECMP collision (the leaves hash
the UDP source port only and every QP sends from one port) and a tenant of another DSCP in the
RoCE queue. The default path stays what it was."""

from __future__ import annotations

import numpy as np
import pytest

from rocesim import Background, Collective, Fabric, Topology, Workload, simulate
from rocesim.config import FIXED_UDP_SPORT, EcmpConfig
from rocesim.scenario import ScenarioError, build_scenario
from rocesim.workload import ROCE_DSCP

TOPO = Topology(leaves=2, spines=2, hosts_per_leaf=4)
COLLIDE = EcmpConfig(hash_fields=("udp_sport",), udp_sport="fixed")


def _a2a(fab: Fabric, qps: int = 1) -> Workload:
    return Workload(collectives=[Collective("alltoall", 2**20, fab.nic_names, iterations=1,
                                            qps_per_connection=qps)])


def test_default_hash_routes_as_before() -> None:
    # Leaf uplinks chosen by the default hash for these 5-tuples, computed with the code before
    # EcmpConfig existed (main at 634f586): the default hash must not move a single flow.
    fab = Fabric(Topology(leaves=2, spines=4, hosts_per_leaf=4), seed=7)
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    dst = np.array([4, 5, 6, 7, 0, 1, 2, 3])
    sport = np.array([49152, 50000, 51234, 60000, 65535, 49153, 55555, 61111])
    path, _ = fab.routes(src, dst, sport)
    assert path[:, 1].tolist() == [20, 16, 22, 18, 24, 26, 26, 28]


def test_planted_collision_puts_every_cross_leaf_flow_on_one_uplink() -> None:
    fab = Fabric(TOPO, seed=0, ecmp=COLLIDE)
    res = simulate(fab, _a2a(fab), seed=1)
    for leaf in fab.leaf_names:
        tx = sorted(v for p, v in res.uplink_bytes.items() if p.startswith(leaf + "/"))
        assert tx[0] == 0 and tx[1] > 0, res.uplink_bytes
    assert set(res.flows["udp_sport"].tolist()) == {FIXED_UDP_SPORT}
    # the same fabric with a source port per QP spreads the flows and runs faster
    spread = Fabric(TOPO, seed=0, ecmp=EcmpConfig(hash_fields=("udp_sport",)))
    ok = simulate(spread, _a2a(spread, qps=4), seed=1)
    assert min(ok.uplink_bytes.values()) > 0.5 * max(ok.uplink_bytes.values())
    assert ok.collectives[0].busbw_gbytes_per_s > 1.3 * res.collectives[0].busbw_gbytes_per_s


def test_foreign_dscp_rides_the_roce_queue() -> None:
    fab = Fabric(TOPO)
    wl = Workload(collectives=_a2a(fab).collectives,
                  background=[Background("incast", 0.3, 2, nics=fab.hosts_under("leaf1"),
                                         priority="roce", dscp=10)])
    fl = simulate(fab, wl, seed=1).flows
    bg, col = fl["kind"] == 1, fl["kind"] == 0
    assert set(fl["dscp"][bg].tolist()) == {10} and set(fl["tc"][bg].tolist()) == {3}
    assert set(fl["dscp"][col].tolist()) == {ROCE_DSCP}
    assert Background("incast", priority="other").marked_dscp == 0


def test_fault_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="hash_fields"):
        EcmpConfig(hash_fields=("vlan",))
    with pytest.raises(ValueError, match="udp_sport"):
        EcmpConfig(udp_sport="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dscp"):
        Background(dscp=64)
    with pytest.raises(ScenarioError, match="ecmp: EcmpConfig.hash_fields"):
        build_scenario({"ecmp": {"hash_fields": ["mac"]}, "workload": {}})
    fab, _, _ = build_scenario({"ecmp": {"hash_fields": ["udp_sport"], "udp_sport": "fixed"},
                                "workload": {}})
    assert fab.ecmp == COLLIDE
