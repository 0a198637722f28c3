"""Paired replicates on SSH are placements: replicate r has its own rank order and probe pairs,
the same for the baseline and every trial; replicate 0 is the inventory's order."""

from __future__ import annotations

import copy
import shlex
from types import SimpleNamespace
from typing import Any

from tuner.cluster.deadman import DeadmanCluster
from tuner.cluster.sim import SimCluster
from tuner.cluster.ssh import SshCluster
from tuner.cluster.statefile import StateFileCluster
from tuner.experiment import FabricSpec, TopologySpec
from tuner.inventory import parse_inventory
from tuner.lifecycle.fleet import FleetCluster
from tuner.ssh.placement import describe, for_replicate, varies
from tuner.ssh.plan import background_flows, nccl_argv, probe_flows
from tuner.workload import BackgroundPart, CollectivePart, ProbePart

PART = CollectivePart(op="all_reduce", size_bytes=1 << 20, iterations=2)
PROBE = ProbePart(size_bytes=64, pairs=1)


def _inventory(data: dict[str, Any], hosts: int, **launcher: Any) -> Any:
    data = copy.deepcopy(data)
    base = data["hosts"][1]
    data["hosts"] = data["hosts"][:hosts] + [
        {**base, "name": f"host{i}", "address": f"127.0.10.{11 + i}"} for i in range(2, hosts)]
    data["launcher"].update(launcher)
    data["switches"] = []  # describe() then reads nothing over SSH
    return parse_inventory(data)


def _hosts_of(argv: list[str]) -> list[str]:
    return argv[argv.index("-H") + 1].split(",")


def test_replicate_zero_is_the_inventory_order(inventory_data: dict[str, Any]) -> None:
    inv = _inventory(inventory_data, 4)
    place = for_replicate(inv, 0)
    assert place.ranks == place.probe_hosts == ("host0", "host1", "host2", "host3")
    assert _hosts_of(nccl_argv(inv, PART, place=place)) == _hosts_of(nccl_argv(inv, PART))
    assert [(f.server, f.client) for f in probe_flows(inv, PROBE, place)] == [("host0", "host1")]


def test_a_replicate_is_one_placement_and_replicates_differ(
        inventory_data: dict[str, Any]) -> None:
    inv = _inventory(inventory_data, 4)
    # the confirmation draws large replicate numbers: each still maps to one placement
    for r in (1, 2, 1_234_567):
        assert for_replicate(inv, r) == for_replicate(inv, r)
    places = [for_replicate(inv, r) for r in range(1, 41)]
    assert len({p.ranks for p in places}) >= 12  # of 24 orders
    assert len({p.probe_hosts[:2] for p in places}) >= 8  # of 12 first pairs
    assert any(p.ranks[:2] != p.probe_hosts[:2] for p in places)  # drawn apart
    for p in places:
        assert sorted(p.ranks) == sorted(p.probe_hosts) == ["host0", "host1", "host2", "host3"]


def test_the_derivation_is_pinned(inventory_data: dict[str, Any]) -> None:
    """A resumed study (another machine, another Python) must pair with its baseline: the
    placement of a replicate never changes. Changing the derivation breaks resumed studies."""
    inv = _inventory(inventory_data, 4)
    place = for_replicate(inv, 1_234_567)
    assert (place.ranks, place.probe_hosts) == (PINNED_RANKS, PINNED_PROBES)


PINNED_RANKS = ("host2", "host1", "host3", "host0")
PINNED_PROBES = ("host2", "host3", "host1", "host0")


def test_the_placement_reaches_every_command_line(inventory_data: dict[str, Any]) -> None:
    inv = _inventory(inventory_data, 4)
    place = next(p for r in range(1, 50) if (p := for_replicate(inv, r)).ranks[0] != "host0")
    address = {h.name: h.address for h in inv.hosts}
    argv = nccl_argv(inv, PART, place=place)
    assert _hosts_of(argv) == [address[n] for n in place.ranks]
    assert shlex.split(shlex.join(argv)) == argv  # still one quoted word each
    [flow] = probe_flows(inv, PROBE, place)
    assert (flow.server, flow.client) == place.probe_hosts[:2]
    assert flow.client_cmd.endswith(" " + address[place.probe_hosts[0]])
    [*incast] = background_flows(inv, [BackgroundPart(pattern="incast", fan_in=2)], 5, place)
    assert {f.server for f in incast} == {place.ranks[0]}  # the receiver moves with the ranks
    note = describe(place, [(flow.server, flow.client)])
    assert note == (f"placement of replicate {place.replicate}: ranks {','.join(place.ranks)}"
                    f"; probes {flow.server}<-{flow.client}")


def test_two_hosts_cannot_vary_and_say_so(inventory_data: dict[str, Any]) -> None:
    two = _inventory(inventory_data, 2)
    assert not varies(two)
    for r in (0, 1, 2, 3, 1_234_567):  # every replicate keeps the inventory order
        place = for_replicate(two, r)
        assert place.ranks == place.probe_hosts == ("host0", "host1")
    assert SshCluster(two).describe().facts["placements"] == "fixed"
    wrapped = DeadmanCluster(SshCluster(two), timeout_s=0)  # wrappers forward describe()
    assert wrapped.describe().facts["placements"] == "fixed"
    fleet = SimpleNamespace(inventory=two, group="pod1", pool=None)  # a promotion wave
    assert FleetCluster(fleet, []).describe().facts["placements"] == "fixed"  # type: ignore
    four = _inventory(inventory_data, 4, latency_hosts=["host1", "host3"])
    assert varies(four)  # the rank order varies; the one probe pair cannot
    assert {for_replicate(four, r).probe_hosts for r in range(20)} == {("host1", "host3")}
    assert SshCluster(four).describe().facts["placements"] == "vary"


def test_the_simulator_and_wrappers_report_varying_placements(tmp_path: Any) -> None:
    spec = FabricSpec(topology=TopologySpec(leaves=2, spines=1, hosts_per_leaf=3),
                      max_time_us=5_000, step_us=250)
    sim = SimCluster(spec, ["leaf0"])
    assert sim.describe().facts["placements"] == "vary"
    assert StateFileCluster(sim, tmp_path / "state.json").describe().facts["placements"] \
        == "vary"
