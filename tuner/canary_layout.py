"""Where the canary sits, for the ``congestion_points`` pre-flight check (``safety.coverage``).

The edge between a cluster and the pure check: on the simulated fabric the layout comes from
the rocesim topology (each canary NIC's leaf, every switch's ports towards hosts and spines;
every workload part runs on all canary NICs, as ``SimCluster`` places it); over SSH from the
inventory (``hosts[].leaf`` or ``rails[].leaf``, ``switches[].role`` and ``uplink_ports``;
collectives and background flows use every canary host, placements permute them, probes the
latency hosts). A switch counts as tuned when the study writes ECN (an ECN knob searched or
fixed), a NIC when it writes DCQCN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from safety.coverage import CanaryLayout, PartPlacement, Tuned, check_coverage
from tuner.experiment import KMAX_RATIO
from tuner.settings import NIC_KNOBS, SWITCH_KNOBS

if TYPE_CHECKING:
    from safety.preflight import CheckResult
    from tuner.experiment import Experiment
    from tuner.inventory import Inventory
    from tuner.workload import Part


def _writes(exp: Experiment) -> tuple[bool, bool]:
    """(switch ECN written, NIC DCQCN written) by the study's search space."""
    from tuner.space import build_space

    names = {d.name for d in build_space(exp).dims} | set(exp.search.fixed)
    return (bool(names & {*SWITCH_KNOBS, KMAX_RATIO}), bool(names & set(NIC_KNOBS)))


def part_name(i: int, part: Part) -> str:
    detail = getattr(part, "op", None) or getattr(part, "pattern", None)
    return f"parts[{i}] {part.kind}" + (f" {detail}" if detail else "")


def _ports(ports: list[str]) -> str:
    return ", ".join(ports[:4]) + (f" (+{len(ports) - 4} more)" if len(ports) > 4 else "")


def sim_layout(exp: Experiment, fabric: Any, canary_switches: list[str],
               canary_nics: list[str]) -> CanaryLayout:
    """The layout of a ``sim`` canary: ``fabric`` is its ``rocesim.Fabric``. A switch's ECN
    (rocesim sets it per switch, on the RoCE class) applies to every port of it, uplinks too."""
    from rocesim.fabric import ROCE_TC

    ecn, dcqcn = _writes(exp)
    leaf_of = {n: fabric.leaf_names[int(fabric.nic_leaf[fabric.nic_index(n)])]
               for n in canary_nics}
    tuned: list[Tuned] = []
    nic_names, spines = set(fabric.nic_names), set(fabric.spine_names)
    for sw in canary_switches if ecn else []:
        out = [ln for ln in fabric.links if ln.src == sw]
        down = [ln.src_port.split("/", 1)[1] for ln in out if ln.dst in nic_names]
        up = [ln.src_port.split("/", 1)[1] for ln in out if ln.dst in spines]
        what = f"ECN on TC {ROCE_TC} of "
        if sw in spines:
            tuned.append(Tuned(target=sw, point="spine_downlink", what=what + _ports(
                [ln.src_port.split("/", 1)[1] for ln in out])))
            continue
        tuned.append(Tuned(target=sw, point="leaf_downlink", what=what + _ports(down)))
        if up:
            tuned.append(Tuned(target=sw, point="leaf_uplink", what=what + _ports(up)))
    tuned += [Tuned(target=n, point="nic_egress", what="DCQCN") for n in canary_nics if dcqcn]
    parts = [PartPlacement(name=part_name(i, p), nics=list(canary_nics))
             for i, p in enumerate(exp.workload.parts)]
    return CanaryLayout(source="rocesim topology", nic_leaf=dict(leaf_of),
                        spines=bool(spines), parts=parts, tuned=tuned)


def ssh_layout(exp: Experiment, inv: Inventory) -> CanaryLayout:
    """The layout of an SSH canary, from the inventory."""
    from tuner.ssh.placement import latency_hosts

    ecn, dcqcn = _writes(exp)
    nic_leaf: dict[str, str | None] = {}
    nic_rail: dict[str, int] = {}
    by_host: dict[str, list[str]] = {}
    for h in inv.hosts:
        for k, r in enumerate(h.rail_entries()):
            nic_leaf[r.nic], nic_rail[r.nic] = r.leaf, k
            by_host.setdefault(h.name, []).append(r.nic)
    every = [n for nics in by_host.values() for n in nics]
    probes = [n for h in latency_hosts(inv) for n in by_host[h]]
    parts = [PartPlacement(name=part_name(i, p), nics=probes if p.kind == "probe" else every)
             for i, p in enumerate(exp.workload.parts)]
    tuned: list[Tuned] = []
    for s in inv.switches if ecn else []:
        what = f"ECN on queue {s.lossless_queue} ({s.canary_profile}) of "
        if s.role == "spine":
            tuned.append(Tuned(target=s.name, point="spine_downlink",
                               what=what + _ports(s.canary_ports)))
            continue
        down = [p for p in s.canary_ports if p not in s.uplink_ports]
        up = [p for p in s.canary_ports if p in s.uplink_ports]
        if down:
            tuned.append(Tuned(target=s.name, point="leaf_downlink", what=what + _ports(down)))
        if up:
            tuned.append(Tuned(target=s.name, point="leaf_uplink", what=what + _ports(up)))
    tuned += [Tuned(target=n, point="nic_egress", what="DCQCN") for n in every if dcqcn]
    return CanaryLayout(source="inventory (hosts[].leaf, switches[].role/uplink_ports)",
                        nic_leaf=nic_leaf, nic_rail=nic_rail, parts=parts, tuned=tuned)


def coverage_checks(exp: Experiment, cluster: Any) -> list[CheckResult]:
    """The ``congestion_points`` rows for ``cluster`` (sim or SSH; others: none)."""
    inner = getattr(cluster, "inner", cluster)
    fabric = getattr(inner, "_fabric", None)
    if fabric is not None:
        desc = inner.describe()
        return check_coverage(sim_layout(exp, fabric, list(desc.canary_switches),
                                         list(desc.canary_nics)))
    inv = getattr(inner, "inventory", None)
    return check_coverage(ssh_layout(exp, inv)) if inv is not None else []
