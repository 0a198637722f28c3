"""NCCL Tree AllReduce in rocesim (issue 11 item 6).

Sources:
- [TREES] NVIDIA/nccl src/graph/trees.cc: ncclGetBtree / ncclGetDtree and the tree figures in
  their comments (copied below as expected values): 14 ranks (first tree), 12 ranks (mirrored
  second tree), 13 ranks (shifted second tree).
- [NCCL-TESTS] nccl-tests doc/PERFORMANCE.md: AllReduce busbw = algbw x 2(n-1)/n, whatever
  the algorithm; every rank must send and receive 2(n-1)/n x S at least.
- [TREE-BW] in a double binary tree every edge carries S/2 up and S/2 down per tree, so the
  NICs together send 2 x 2 x (n-1) x S/2 = 2(n-1) S (as the ring), but an inner rank sends
  S/2 up + 2 x S/2 down in its inner tree plus S/2 up in the other: 2S, so
  busbw <= line x (n-1)/n.
"""

from __future__ import annotations

import pytest

from rocesim import Collective, Fabric, Simulation, Topology, Workload
from rocesim.workload import double_binary_tree, tree_chunk_bytes

# [TREES] figures, as rank: (parent, child0, child1); -1 = none
NCCL_14_FIRST = {0: (-1, -1, 8), 8: (0, 4, 12), 4: (8, 2, 6), 12: (8, 10, 13), 2: (4, 1, 3),
                 6: (4, 5, 7), 10: (12, 9, 11), 13: (12, -1, -1), 1: (2, -1, -1)}
NCCL_12_SECOND = {11: (-1, -1, 3), 3: (11, 7, 1), 7: (3, 9, 5), 1: (3, 2, 0), 5: (7, 6, 4),
                  9: (7, 10, 8), 0: (1, -1, -1), 10: (9, -1, -1)}
NCCL_13_SECOND = {1: (-1, -1, 9), 9: (1, 5, 0), 5: (9, 3, 7), 0: (9, 11, -1), 3: (5, 2, 4),
                  7: (5, 6, 8), 11: (0, 10, 12), 12: (11, -1, -1)}


@pytest.mark.parametrize(("n", "which", "expected"), [(14, 0, NCCL_14_FIRST),
                                                      (12, 1, NCCL_12_SECOND),
                                                      (13, 1, NCCL_13_SECOND)])
def test_trees_are_nccls(n: int, which: int, expected: dict[int, tuple[int, int, int]]) -> None:
    tree = double_binary_tree(n)[which]
    for rank, links in expected.items():
        parent, c0, c1 = tree[rank]
        assert parent == links[0]
        assert {c0, c1} - {-1} == set(links[1:]) - {-1}


@pytest.mark.parametrize("n", range(2, 65))
def test_each_tree_spans_the_ranks_and_even_trees_share_no_inner_rank(n: int) -> None:
    trees = double_binary_tree(n)
    for tree in trees:
        assert sum(1 for p, _, _ in tree if p < 0) == 1  # one root
        for r in range(n):  # every rank reaches the root; children point back
            seen, x = set(), r
            while tree[x][0] >= 0:
                assert x not in seen
                seen.add(x)
                x = tree[x][0]
            for c in tree[r][1:]:
                assert c < 0 or tree[c][0] == r
    if n % 2 == 0:
        inner = [{r for r in range(n) if max(t[r][1:]) >= 0} for t in trees]
        assert not inner[0] & inner[1]


def test_tree_chunk_follows_nccls_halving_rule() -> None:
    # 512 KiB steps halved while a channel holds < 8 x depth chunks (floor 128 KiB), < 4 x depth
    # (floor 64 KiB), < depth (floor 32 KiB)
    assert tree_chunk_bytes(64 * 2**20, 3) == 512 * 1024
    assert tree_chunk_bytes(2 * 2**20, 3) == 128 * 1024  # 16 chunks: < 24 but >= 12
    assert tree_chunk_bytes(2**20, 3) == 64 * 1024  # 8 of 128 KiB < 12
    assert tree_chunk_bytes(256 * 1024, 3) == 64 * 1024
    assert tree_chunk_bytes(64 * 1024, 4) == 32 * 1024


def _allreduce(algo: str, size: int, iterations: int = 2
               ) -> tuple[Simulation, float, list[float]]:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=8))
    sim = Simulation(fab, Workload(collectives=[
        Collective("all_reduce", size, fab.nic_names, iterations=iterations,
                   algo=algo)]))  # type: ignore[arg-type]
    res = sim.run()
    assert res.collectives[0].completed
    return sim, res.collectives[0].busbw_gbytes_per_s, res.collectives[0].iteration_times_us


def test_tree_allreduce_moves_2_n_minus_1_s_and_stays_under_its_bound() -> None:
    size, n = 8 * 2**20, 8
    sim, busbw, _ = _allreduce("tree", size)
    topo = sim.fabric.topo
    wire = topo.wire_bytes / topo.payload_bytes
    tx = sum(c.get("tx_prio3_bytes", 0) for c in sim.counters().values())
    assert tx == pytest.approx(2 * 2 * (n - 1) * size * wire, rel=1e-6)  # [TREE-BW]
    assert sim.f_src.size == 4 * 2 * 2 * (n - 1)  # channels x trees x (up, down) x edges
    goodput = 100e9 / 8 * topo.efficiency / 1e9  # GB/s
    bound = goodput * (n - 1) / n
    assert 0.75 * bound <= busbw <= bound * 1.001
    _, ring, _ = _allreduce("ring", size)
    assert ring == pytest.approx(goodput, rel=0.02) and ring > busbw


def test_tree_ranks_forward_only_what_their_children_delivered() -> None:
    # 1 MiB, 4 channels: 128 KiB per tree edge in 64 KiB chunks; store-and-forward through
    # depth 3 up and 3 down makes an iteration > 1.5 x the bandwidth-only time (2S at line
    # rate per inner rank), which a tree without the dependencies would about match.
    size = 2**20
    sim, _, times = _allreduce("tree", size)
    topo = sim.fabric.topo
    bandwidth_only_us = 2 * size * topo.wire_bytes / topo.payload_bytes / (100e3 / 8)
    assert min(times) > 1.5 * bandwidth_only_us


def test_tree_is_for_all_reduce_only() -> None:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=4))
    with pytest.raises(ValueError, match="all_reduce only"):
        Collective("alltoall", 2**20, fab.nic_names, algo="tree")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown algorithm"):
        Collective("all_reduce", 2**20, fab.nic_names, algo="pat")  # type: ignore[arg-type]


def test_an_experiments_collective_part_chooses_the_algorithm() -> None:
    # tuner side: `algo` on a collective part reaches rocesim through the simulated backend
    from tuner.cluster.sim import SimCluster
    from tuner.experiment import FabricSpec, TopologySpec
    from tuner.workload import CollectivePart
    from tuner.workload import Workload as TunerWorkload

    spec = FabricSpec(topology=TopologySpec(kind="single_switch", hosts_per_leaf=8))
    cluster = SimCluster(spec, ["sw0"])
    parts = {algo: CollectivePart(op="all_reduce", size_bytes=2**20, iterations=1, algo=algo)
             for algo in ("ring", "tree")}
    busbw = {algo: cluster.measure(TunerWorkload(parts=[p])).collectives[0].busbw_gbytes_per_s
             for algo, p in parts.items()}
    # the same numbers as rocesim run directly (a 1 MiB tree pays its pipeline depth)
    direct = {algo: _allreduce(algo, 2**20, iterations=1)[1] for algo in parts}
    assert busbw == pytest.approx(direct, rel=0.02)
    assert busbw["tree"] < 0.8 * busbw["ring"]
    with pytest.raises(ValueError, match="all_reduce only"):
        CollectivePart(op="alltoall", size_bytes=2**20, algo="tree")
