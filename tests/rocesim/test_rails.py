"""Rail-aligned leaves (``Topology.rails``, issue #24 item 6): the wiring 8-rail GPU clusters
use, and what it does to the traffic of one rail.

Sources:
- [SPOD] NVIDIA DGX SuperPOD reference architecture (rail-optimised compute fabric): NIC k of
  every node of a scalable unit connects to leaf k, so same-rail traffic inside a unit stays
  on one leaf.
- [NCCL] NVIDIA/nccl-tests doc/PERFORMANCE.md: busbw for alltoall is algbw x (n-1)/n, i.e. the
  bytes each rank sends to the others per second; for all_reduce algbw x 2(n-1)/n, which a
  ring keeps equal to the slowest ring hop's rate.
- [ROCE] goodput = line rate x payload / wire bytes (4096 / 4178 here), as in
  test_rocesim_physics.py.
"""

from __future__ import annotations

import pytest

from rocesim import Collective, Fabric, Topology, Workload, simulate


def test_rails_wire_nic_k_of_each_group_to_its_own_leaf() -> None:
    # [SPOD]: 2 groups of 2 hosts, 2 rails: leaf g*2 + k carries rail k of group g
    fab = Fabric(Topology(leaves=4, spines=2, hosts_per_leaf=2, nics_per_host=2, rails=True))
    assert fab.topo.n_hosts == 4 and fab.topo.n_nics == 8 and fab.topo.nics_per_leaf == 2
    assert {leaf: fab.hosts_under(leaf) for leaf in fab.leaf_names} == {
        "leaf0": ["host0/mlx5_0", "host1/mlx5_0"], "leaf1": ["host0/mlx5_1", "host1/mlx5_1"],
        "leaf2": ["host2/mlx5_0", "host3/mlx5_0"], "leaf3": ["host2/mlx5_1", "host3/mlx5_1"]}
    # each leaf numbers its own NIC ports from Ethernet0, uplinks after them
    ports = {(ln.src, ln.dst): ln.dst_port for ln in fab.links}
    assert ports[("host1/mlx5_1", "leaf1")] == "leaf1/Ethernet4"
    assert ports[("leaf3", "spine1")] == "spine1/Ethernet12"
    assert fab.links[int(fab.leaf_up[3, 1])].src_port == "leaf3/Ethernet12"
    # oversubscription counts a leaf's NIC ports: 2 x 100G down, 2 x 100G up
    assert fab.topo.oversubscription == pytest.approx(1.0)
    # the default wiring: both NICs of a host on its leaf (4 NIC ports a leaf)
    flat = Fabric(Topology(leaves=4, spines=2, hosts_per_leaf=2, nics_per_host=2))
    assert flat.hosts_under("leaf0") == ["host0/mlx5_0", "host0/mlx5_1", "host1/mlx5_0",
                                         "host1/mlx5_1"]
    assert flat.topo.oversubscription == pytest.approx(2.0)


def test_rails_refuse_a_leaf_count_that_is_not_a_multiple_of_the_rails() -> None:
    with pytest.raises(ValueError, match=r"leaves \(3\) must be a multiple of nics_per_host"):
        Topology(leaves=3, hosts_per_leaf=2, nics_per_host=2, rails=True)
    with pytest.raises(ValueError, match="need kind leaf_spine"):
        Topology(kind="single_switch", nics_per_host=2, rails=True)


@pytest.mark.parametrize("op", ["alltoall", "all_reduce"])
def test_one_rail_of_a_group_never_crosses_the_spine(op: str) -> None:
    # Rail 0 of 4 hosts behind a 25G spine (16:1). Rail-aligned, all four rail-0 NICs sit on
    # leaf0 [SPOD]: no byte reaches an uplink and busbw is the NIC's goodput [NCCL], 100 Gb/s x
    # 4096/4178 = 12.25 GB/s. Wired the default way (2 hosts a leaf), the same four NICs span
    # two leaves and the 25G uplink decides:
    # - alltoall: each leaf's 2 ranks send 2/3 of their bytes across it, so busbw (the bytes a
    #   rank sends per second) <= 25 Gb/s x 3/4 x 4096/4178 = 2.30 GB/s;
    # - ring all_reduce: ranks 1->2 and 3->0 each cross one uplink, so every ring hop runs at
    #   the uplink's 25 Gb/s x 4096/4178 = 3.06 GB/s.
    ranks = [f"host{h}/mlx5_0" for h in range(4)]
    goodput = 100e9 / 8 * 4096 / 4178 / 1e9
    bound = {"alltoall": 0.75, "all_reduce": 1.0}[op] * 25e9 / 8 * 4096 / 4178 / 1e9

    def run(topo: Topology) -> tuple[float, int]:
        fab = Fabric(topo, seed=1)
        res = simulate(fab, Workload(collectives=[Collective(op, 16 * 2**20, ranks,
                                                             iterations=2)]), seed=1)
        return res.collectives[0].busbw_gbytes_per_s, sum(res.uplink_bytes.values())

    railed, railed_up = run(Topology(leaves=4, spines=1, hosts_per_leaf=4, nics_per_host=2,
                                     rails=True, uplink_gbps=25))
    flat, flat_up = run(Topology(leaves=4, spines=1, hosts_per_leaf=2, nics_per_host=2,
                                 uplink_gbps=25))
    assert railed_up == 0
    assert railed == pytest.approx(goodput, rel=0.01)
    assert flat_up > 0
    assert flat == pytest.approx(bound, rel=0.01)
