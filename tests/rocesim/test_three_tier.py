"""Three tiers (``Topology(kind="three_tier")``, issue #24 item 5): pods of leaves and spines
under super-spines in planes, six-hop routes between pods, and oversubscription at each tier.

Sources:
- [CLOS] the three-stage folded Clos as data-centre fabrics build it (e.g. Facebook's "data
  center fabric" pods and spine planes, Al-Fares et al. "A scalable, commodity data center
  network architecture", SIGCOMM 2008): spine ``s`` of every pod connects to the super-spines
  of plane ``s``; a flow between pods goes leaf, spine, super-spine, spine, leaf.
- [NCCL] NVIDIA/nccl-tests doc/PERFORMANCE.md: busbw for alltoall is algbw x (n-1)/n; nccl's
  alltoall sends 1/n of each rank's buffer to every rank (itself included).
- [ROCE] goodput = line rate x payload / wire bytes (4096 / 4178 here), as in
  test_rocesim_physics.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rocesim import Collective, Fabric, Topology, Workload, simulate
from rocesim.config import EcmpConfig

EFF = 4096 / 4178  # [ROCE]
RANKS = [f"host{h}/mlx5_0" for h in range(8)]
# 2 pods x 2 leaves x 2 hosts; one spine per pod and one super-spine: no ECMP choice, so each
# bound below is the bottleneck's capacity, not a hash's luck
ONE_PATH = dict(kind="three_tier", pods=2, leaves=2, spines=1, super_spines=1,
                hosts_per_leaf=2)


def _alltoall_busbw(topo: Topology, ranks: list[str] = RANKS, op: str = "alltoall") -> float:
    fab = Fabric(topo, seed=1)
    res = simulate(fab, Workload(collectives=[Collective(op, 16 * 2**20, ranks,
                                                         iterations=2)]), seed=1)
    return float(res.collectives[0].busbw_gbytes_per_s)


def test_pods_planes_ports_and_six_hop_routes() -> None:
    fab = Fabric(Topology(kind="three_tier", pods=2, leaves=2, spines=2, super_spines=4,
                          hosts_per_leaf=2))
    assert fab.switch_names == ["leaf0", "leaf1", "leaf2", "leaf3", "spine0", "spine1",
                                "spine2", "spine3", "super0", "super1", "super2", "super3"]
    cables = {(ln.src, ln.dst) for ln in fab.links}
    # [CLOS] leaves reach only their pod's spines; spine s of each pod reaches plane s
    assert ("leaf2", "spine2") in cables and ("leaf2", "spine0") not in cables
    assert {d for s, d in cables if s == "spine1"} == {"leaf0", "leaf1", "super2", "super3"}
    assert {d for s, d in cables if s == "super3"} == {"spine1", "spine3"}
    ports = {(ln.src, ln.dst): (ln.src_port, ln.dst_port) for ln in fab.links}
    assert ports[("spine3", "super2")] == ("spine3/Ethernet8", "super2/Ethernet4")
    assert ports[("leaf3", "spine3")] == ("leaf3/Ethernet12", "spine3/Ethernet4")
    src = np.array([0, 0, 0])
    path, hops = fab.routes(src, np.array([1, 2, 4]), np.full(3, 50_000))
    assert hops.tolist() == [2, 4, 6]  # same leaf, same pod, another pod
    names = [(fab.links[i].src, fab.links[i].dst) for i in path[2] if i >= 0]
    assert [a for a, _ in names][:2] == ["host0/mlx5_0", "leaf0"] and names[-1] == (
        "leaf2", "host4/mlx5_0")
    spine, sup, spine2 = names[1][1], names[2][1], names[3][1]
    # the same plane on both sides: spine s of pod 0, a super-spine of plane s, spine s of pod 1
    plane = int(spine.removeprefix("spine"))
    assert sup in (f"super{2 * plane}", f"super{2 * plane + 1}")
    assert spine2 == f"spine{2 + plane}"


def test_both_ecmp_stages_spread_and_a_fixed_source_port_collides() -> None:
    topo = Topology(kind="three_tier", pods=2, leaves=2, spines=2, super_spines=4,
                    hosts_per_leaf=2)
    n = 2000
    src, dst = np.zeros(n, dtype=np.int64), np.full(n, 4, dtype=np.int64)  # pod 0 -> pod 1
    sport = np.random.default_rng(0).integers(0xC000, 0x10000, n)
    path, _ = Fabric(topo, seed=3).routes(src, dst, sport)
    supers = {int(x) for x in path[:, 3]}  # the super-spine -> spine link of each flow
    assert len(supers) == 4  # both planes, both super-spines of each (a salt of 0 gave 3)
    fixed = Fabric(topo, seed=3, ecmp=EcmpConfig(hash_fields=("udp_sport",)))
    path, _ = fixed.routes(src, dst, np.full(n, 0xC000))
    assert len({int(x) for x in path[:, 3]}) == 1  # a planted collision: one path end to end


def test_the_super_spine_tier_bounds_traffic_between_pods() -> None:
    # 25G between spine and super-spine, 100G below (2:1 at the leaves, 8:1 at the spines).
    # [NCCL] each of pod 0's 4 ranks sends 4/8 of its buffer S to pod 1: 2S over one 25G link,
    # so algbw <= 25 Gb/s / 2 and busbw <= 25/8 GB/s / 2 x 7/8 x [ROCE] = 1.340 GB/s.
    topo = Topology(**ONE_PATH, core_gbps=25.0)
    assert topo.oversubscription == pytest.approx(2.0)
    assert topo.spine_oversubscription == pytest.approx(8.0)
    bound = 25 / 8 / 2 * 7 / 8 * EFF
    assert _alltoall_busbw(topo) == pytest.approx(bound, rel=0.02)


def test_the_leaf_tier_bounds_when_the_core_does_not() -> None:
    # 25G leaf uplinks, 100G above: each leaf's 2 ranks send 6/8 of their buffers off the leaf
    # (1.5S over 25G: busbw <= 25/8 / 1.5 x 7/8 x [ROCE] = 1.787 GB/s). The super-spines are
    # not the bottleneck: the same 8 ranks on a two-tier fabric of 4 such leaves run at the
    # same rate (the shortfall from the bound, 5 %, is the two-tier fabric's too).
    three = _alltoall_busbw(Topology(**ONE_PATH, uplink_gbps=25.0, core_gbps=100.0))
    two = _alltoall_busbw(Topology(leaves=4, spines=1, hosts_per_leaf=2, uplink_gbps=25.0))
    bound = 25 / 8 / 1.5 * 7 / 8 * EFF
    assert three == pytest.approx(two, rel=0.03)
    assert 0.9 * bound < three <= bound


def test_a_collective_inside_one_pod_never_reaches_the_super_spines() -> None:
    # a ring all_reduce over pod 0's 4 NICs with a 1 Gb/s core runs at the NICs' goodput
    busbw = _alltoall_busbw(Topology(**ONE_PATH, core_gbps=1.0), RANKS[:4], "all_reduce")
    assert busbw == pytest.approx(100 / 8 * EFF, rel=0.01)


def test_three_tier_topologies_are_refused_where_they_do_not_hold() -> None:
    with pytest.raises(ValueError, match="needs >= 2 pods"):
        Topology(kind="three_tier", pods=1, super_spines=2)
    with pytest.raises(ValueError, match=r"super_spines \(3\) must be a positive multiple"):
        Topology(kind="three_tier", pods=2, spines=2, super_spines=3)
    with pytest.raises(ValueError, match="three_tier only"):
        Topology(pods=2)
