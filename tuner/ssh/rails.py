"""A host's rails as sysfs has them: every listed RDMA device exists, its netdev is that
device's, its PCI address and the perftest/NCCL GID index of its data address.

One command per host reads, per rail, ``/sys/class/infiniband/<dev>`` (absent: not a device of
this host), ``<dev>/device/net/*`` (the netdevs of the device's PCI function), ``<dev>/device``
(a link to the PCI function: its name is the PCI address) and the port's GID table. The GID
table is the kernel's (Documentation/ABI/stable/sysfs-class-infiniband, written by
drivers/infiniband/core/sysfs.c): ``ports/<p>/gids/<i>`` holds the GID as eight groups of four
hex digits (an IPv4 address as the mapped ``0000:...:ffff:0a00:0001``), and
``ports/<p>/gid_attrs/types/<i>`` its type, ``IB/RoCE v1`` or ``RoCE v2``; reading the type of
an empty entry fails (EINVAL), so errors are dropped. rdma-core's and MLNX_OFED's
``show_gids`` script reads the same two files. The index perftest's ``-x`` and NCCL's
``NCCL_IB_GID_INDEX`` need is the RoCE v2 entry holding the rail's data address.

Pure: ``command`` builds the line, ``resolve`` turns its output into one checked entry per
rail or a ``ConfigError`` (exit 2) naming host, device and field; nothing has been written.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.errors import ConfigError
from tuner.ssh.shell import check, q

if TYPE_CHECKING:
    from tuner.inventory import HostEntry

MARK = "==ecntune:rail={}=="
ROCE_V2 = "RoCE v2"


@dataclass
class RailFacts:
    """What sysfs says about one RDMA device."""

    present: bool = False
    netdevs: list[str] = field(default_factory=list)
    pci: str = ""
    gids: dict[int, str] = field(default_factory=dict)
    types: dict[int, str] = field(default_factory=dict)


def command(host: HostEntry) -> str:
    """One line printing, per rail, a mark then ``present``, ``net:<if>``, ``pci:<bdf>`` and
    ``grep -H`` lines of the GID table (``gid_attrs/types/3:RoCE v2``, ``gids/3:...``)."""
    parts = []
    for r in host.rail_entries():
        dev = check("rdma_device", r.rdma_device)
        d = q("path", r.sys_path(f"/sys/class/infiniband/{dev}"))
        parts.append(
            f"echo {shlex.quote(MARK.format(dev))}; if [ -d {d} ]; then echo present; "
            f"ls {d}/device/net 2>/dev/null | sed 's/^/net:/'; "
            f"readlink -f {d}/device | sed 's|.*/|pci:|'; "
            f"(cd {d}/ports/{int(r.rdma_port)} && grep -H . gid_attrs/types/* gids/*) "
            "2>/dev/null; fi")
    return "; ".join(parts)


def parse(text: str) -> dict[str, RailFacts]:
    """Output of ``command`` -> facts per RDMA device."""
    out: dict[str, RailFacts] = {}
    cur: RailFacts | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("==ecntune:rail=") and line.endswith("=="):
            cur = out.setdefault(line[len("==ecntune:rail="):-2], RailFacts())
        elif cur is None or not line:
            continue
        elif line == "present":
            cur.present = True
        elif line.startswith("net:"):
            cur.netdevs.append(line[4:])
        elif line.startswith("pci:"):
            cur.pci = line[4:]
        else:
            name, sep, value = line.partition(":")
            kind, _, idx = name.rpartition("/")
            if sep and idx.isdigit():
                if kind == "gid_attrs/types":
                    cur.types[int(idx)] = value.strip()
                elif kind == "gids":
                    cur.gids[int(idx)] = value.strip().lower()
    return out


def roce_v2_index(facts: RailFacts, address: str) -> int | None:
    """The lowest index whose GID is ``address`` (IPv4-mapped) and whose type is RoCE v2."""
    from tuner.diagnose.parse import ipv4_gid

    want = ipv4_gid(address)
    hits = sorted(i for i, g in facts.gids.items()
                  if g == want and facts.types.get(i) == ROCE_V2)
    return hits[0] if hits else None


def resolve(host: HostEntry, text: str) -> list[HostEntry]:
    """The host's rail entries with PCI address and GID index from sysfs; a rail that
    disagrees with the host's devices raises ``ConfigError`` naming host, device and field."""
    facts = parse(text)
    out = []
    many = bool(host.rails)
    for k, r in enumerate(host.rail_entries()):
        where = f"hosts ({host.name}).rails[{k}]" if many else f"hosts ({host.name})"
        f = facts.get(r.rdma_device, RailFacts())
        ib = r.sys_path("/sys/class/infiniband")
        if not f.present:
            raise ConfigError(f"{where}.rdma_device: {r.rdma_device} is not in {ib} on "
                              f"{host.name}")
        if r.netdev not in f.netdevs:
            raise ConfigError(f"{where}.netdev: {r.netdev} is not a netdev of {r.rdma_device} "
                              f"({ib}/{r.rdma_device}/device/net has "
                              f"{', '.join(f.netdevs) or 'none'})")
        if r.pci and f.pci and r.pci.lower() != f.pci.lower():
            raise ConfigError(f"{where}.pci: {r.pci} is not {r.rdma_device}'s PCI function "
                              f"(sysfs: {f.pci})")
        update: dict[str, object] = {}
        if not r.pci:
            if not f.pci:
                raise ConfigError(f"{where}.pci: not given and {ib}/{r.rdma_device}/device "
                                  "does not name a PCI function")
            update["pci"] = check("pci", f.pci)
        if not r.gid_fixed():
            address = r.data_address or r.address
            idx = roce_v2_index(f, address)
            if idx is None:
                raise ConfigError(
                    f"{where}.data_address: no RoCE v2 GID of {address} on {r.rdma_device} "
                    f"port {r.rdma_port} (gids/<i> with gid_attrs/types/<i> 'RoCE v2'); set "
                    "gid_index or the address")
            update["gid_index"] = idx
        out.append(r.model_copy(update=update) if update else r)
    return out


def resolved_host(host: HostEntry, entries: list[HostEntry]) -> HostEntry:
    """``host`` with what ``resolve`` read filled in (PCI addresses, GID indices)."""
    if not host.rails:
        e = entries[0]
        return host.model_copy(update={"pci": e.pci, "gid_index": e.gid_index})
    rails = [r.model_copy(update={"pci": e.pci, "gid_index": e.gid_index})
             for r, e in zip(host.rails, entries, strict=True)]
    return host.model_copy(update={"rails": rails, "pci": rails[0].pci,
                                   "gid_index": entries[0].gid_index})
