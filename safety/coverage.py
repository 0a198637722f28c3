"""Pre-flight: which congestion points the canary's traffic crosses, and whether the tuned
objects sit on them.

Pure: a ``CanaryLayout`` (the leaf every canary NIC hangs under, the NICs each workload part
places on, what the study tunes) in, ``CheckResult`` rows (check ``congestion_points``) out.
A congestion point is an egress queue RoCE traffic can build up in:

* ``nic_egress``      the sending NIC (where DCQCN's reaction point acts);
* ``leaf_downlink``   a leaf port towards a host (incast into a receiver);
* ``leaf_uplink``     a leaf port towards the spines (traffic leaving the leaf);
* ``spine_downlink``  a spine port towards a leaf (traffic entering the receiver's leaf).

A part whose NICs all sit under one leaf never leaves it: its traffic crosses NIC egress and
that leaf's downlinks only, so ECN tuned on uplinks or spines is never exercised, and a winner
promoted to the fleet would carry thresholds there that no trial measured. Traffic stays within
a rail (NCCL on rail-optimised fabrics: rail k talks to rail k, PXN moves cross-rail data over
NVLink first), so a part's NICs are grouped by rail before their leaves are compared. ECMP
spreads cross-leaf traffic over every spine, so a spine's downlinks count as crossed once any
part leaves its leaf. A finding here is a warning, never a refusal: the canary may be small on
purpose.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from safety.preflight import CheckResult

Point = Literal["nic_egress", "leaf_downlink", "leaf_uplink", "spine_downlink"]
POINTS: tuple[Point, ...] = ("nic_egress", "leaf_downlink", "leaf_uplink", "spine_downlink")
POINT_TEXT = {"nic_egress": "NIC egress", "leaf_downlink": "downlinks towards hosts",
              "leaf_uplink": "uplinks", "spine_downlink": "spine downlinks"}
CHECK = "congestion_points"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PartPlacement(BaseModel):
    """One workload part and the canary NICs it may place on (over every replicate)."""

    model_config = _FROZEN
    name: str
    nics: list[str]


class Tuned(BaseModel):
    """One object the study writes: a switch's ECN at one kind of port, or a NIC's DCQCN."""

    model_config = _FROZEN
    target: str  # switch or NIC name
    point: Point
    what: str  # "ECN on queue 3 of Ethernet16, Ethernet20"


class CanaryLayout(BaseModel):
    """Where the canary sits, from the topology (sim) or the inventory (SSH).

    ``nic_leaf`` maps every canary NIC to its leaf (``None``: not known); ``nic_rail`` to its
    rail index (absent: rail 0); ``spines``: the fabric has a spine layer at all."""

    model_config = _FROZEN
    source: str  # "rocesim topology", "inventory hosts[].leaf"
    nic_leaf: dict[str, str | None]
    nic_rail: dict[str, int] = Field(default_factory=dict)
    spines: bool = True
    parts: list[PartPlacement] = Field(default_factory=list)
    tuned: list[Tuned] = Field(default_factory=list)


Crossing = tuple[Point, str]  # (point, NIC or leaf name; "*" for every spine)


def crossed(layout: CanaryLayout) -> set[Crossing]:
    """Every congestion point some part's traffic crosses. A part with a NIC whose leaf is not
    known (``unplaced``) adds its NICs' egress only."""
    out: set[Crossing] = set()
    for part in layout.parts:
        placed = all(layout.nic_leaf.get(n) is not None for n in part.nics)
        for members in _rails(layout, part).values():
            if len(members) < 2:
                continue
            out |= {("nic_egress", n) for n in members}
            if not placed:
                continue
            leaves = {str(layout.nic_leaf[n]) for n in members}
            out |= {("leaf_downlink", leaf) for leaf in leaves}
            if len(leaves) > 1 and layout.spines:
                out |= {("leaf_uplink", leaf) for leaf in leaves} | {("spine_downlink", "*")}
    return out


def _rails(layout: CanaryLayout, part: PartPlacement) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for n in part.nics:
        groups.setdefault(layout.nic_rail.get(n, 0), []).append(n)
    return groups


def unplaced(layout: CanaryLayout) -> list[str]:
    """Canary NICs some part uses whose leaf is not known."""
    return sorted({n for p in layout.parts for n in p.nics if layout.nic_leaf.get(n) is None})


def _exercised(t: Tuned, seen: set[Crossing]) -> bool:
    if t.point == "spine_downlink":
        return ("spine_downlink", "*") in seen
    return (t.point, t.target) in seen


def _summary(layout: CanaryLayout, seen: set[Crossing]) -> str:
    nics = sorted(n for p, n in seen if p == "nic_egress")
    parts = [f"NIC egress ({len(nics)} NICs)"] if nics else []
    for point in ("leaf_downlink", "leaf_uplink"):
        leaves = sorted(d for p, d in seen if p == point)
        if leaves:
            parts.append(f"{POINT_TEXT[point]} on {', '.join(leaves)}")
    if ("spine_downlink", "*") in seen:
        parts.append("spine downlinks (ECMP over every spine)")
    leaves = sorted({str(v) for v in layout.nic_leaf.values() if v is not None})
    where = f"canary NICs under {', '.join(leaves)}" if leaves else "no canary NIC placed"
    return (f"the canary's traffic crosses {'; '.join(parts) or 'no congestion point'} "
            f"({where}; from the {layout.source})")


def _why_not(t: Tuned, layout: CanaryLayout) -> tuple[str, str]:
    """Why the canary's traffic misses ``t``, and what the operator does about it."""
    leaves = sorted({str(v) for v in layout.nic_leaf.values() if v is not None})
    if t.point in ("leaf_uplink", "spine_downlink"):
        why = (f"every canary NIC sits under {leaves[0]}, so the canary's traffic never leaves "
               "that leaf and uplink/spine congestion is never measured" if len(leaves) == 1
               else "no part of the workload spans two leaves, so its traffic never gets there")
        return why, ("add canary hosts under another leaf (simulator: a second leaf in "
                     "canary.switches), or leave these ports out of what is tuned")
    if t.point == "leaf_downlink":
        return ("no canary NIC the workload uses sits under it: the switch carries none of the "
                "canary's flows", "put canary hosts under it, or take it out of the canary")
    return "no part of the workload uses this NIC", "use it in the workload, or drop the host"


def check_coverage(layout: CanaryLayout) -> list[CheckResult]:
    """One summary row of the congestion points crossed, then a warning per tuned object the
    canary's traffic does not reach (or one naming the NICs whose leaf is not known)."""
    out = []
    missing = unplaced(layout)
    switch_tuned = [t for t in layout.tuned if t.point != "nic_egress"]
    if missing and switch_tuned:
        out.append(CheckResult(
            check=CHECK, target="canary", status="warn",
            evidence=f"the leaf of {', '.join(missing)} is not known (inventory hosts[].leaf or "
                     "rails[].leaf): which congestion points the canary crosses, and whether "
                     "the tuned switch ports are among them, is not checked"))
        return out
    seen = crossed(layout)
    out.append(CheckResult(check=CHECK, target="canary", status="pass",
                           evidence=_summary(layout, seen)))
    for t in layout.tuned:
        if _exercised(t, seen):
            continue
        why, fix = _why_not(t, layout)
        out.append(CheckResult(
            check=CHECK, target=t.target, status="warn",
            evidence=f"tunes {t.what} ({POINT_TEXT[t.point]}), but {why}; a winner would "
                     f"carry these values there untested: {fix}"))
    return out
