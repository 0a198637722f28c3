"""Where paired replicate ``r`` runs on an SSH canary: its placement, as pure data.

A placement is the NCCL rank order (the host order of ``{hostlist}``: ring and tree neighbours,
so which links and ECMP paths the collectives use; background flows follow it too) and the
order the latency probe pairs are drawn from. The loop measures the baseline and every trial on
the same replicates, so each replicate must map to one placement, always: replicate 0 is the
inventory's own order; replicate r > 0 orders the hosts by a hash of (r, host name). A hash
rather than an RNG stream: the same on every machine and Python/numpy version (a resumed study
pairs with its baseline), and any r works (the confirmation draws large ones).

With two hosts every order is the same ring and the same probe pair (reversed), so replicates
cannot take different placements: they all keep the inventory's order (``varies`` is False).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.inventory import Inventory

# Fewer hosts than this: every permutation is the same ring and probe pair.
MIN_HOSTS_TO_VARY = 3


@dataclass(frozen=True)
class Placement:
    """Host names in NCCL rank order, and the latency hosts in the order pairs are drawn."""

    replicate: int
    ranks: tuple[str, ...]
    probe_hosts: tuple[str, ...]


def _shuffled(names: list[str], replicate: int, salt: str) -> tuple[str, ...]:
    if replicate == 0 or len(names) < MIN_HOSTS_TO_VARY:
        return tuple(names)

    def key(name: str) -> bytes:
        return hashlib.sha256(f"{salt}\0{replicate}\0{name}".encode()).digest()

    return tuple(sorted(names, key=key))


def latency_hosts(inv: Inventory) -> list[str]:
    """The hosts probe pairs are drawn from: ``launcher.latency_hosts`` or every canary host."""
    return list(inv.launcher.latency_hosts) or [h.name for h in inv.hosts]


def varies(inv: Inventory) -> bool:
    """Whether replicates take different placements on this canary (rank order or probes)."""
    return (len(inv.hosts) >= MIN_HOSTS_TO_VARY
            or len(latency_hosts(inv)) >= MIN_HOSTS_TO_VARY)


def for_replicate(inv: Inventory, replicate: int) -> Placement:
    """The placement of ``replicate``; the rank order and the probe order are drawn apart so
    the probe pairs are not always ring neighbours."""
    r = int(replicate)
    return Placement(replicate=r,
                     ranks=_shuffled([h.name for h in inv.hosts], r, "ranks"),
                     probe_hosts=_shuffled(latency_hosts(inv), r, "probes"))


def describe(place: Placement, probe_pairs: list[tuple[str, str]]) -> str:
    """The measurement's note: ``placement of replicate 3: ranks host2,host0,host1; probes
    host1<-host2`` (server <- client); the same text for the same replicate on any trial."""
    text = f"placement of replicate {place.replicate}: ranks {','.join(place.ranks)}"
    if probe_pairs:
        text += "; probes " + ",".join(f"{s}<-{c}" for s, c in probe_pairs)
    return text
