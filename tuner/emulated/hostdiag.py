"""What ``ecntune diagnose`` reads on an emulated host besides the DCQCN tree, and its faults.

Files under the host's fake root (paths as on a real host, formats as the kernel prints them):

* ``sys/class/net/<if>/carrier_changes`` (rises by 2 per flap: down, then up),
  ``sys/class/net/<if>/device/numa_node`` and ``sys/devices/system/node/node<N>/cpulist``;
* ``proc/interrupts`` (mlx5 completion vectors ``mlx5_comp<n>@pci:<bdf>``, as in the kernel's
  Documentation/networking/multi-pf-netdev.rst) and ``proc/irq/<n>/smp_affinity_list``;
* ``sys/class/infiniband/<dev>/ports/1/gids/<i>`` and ``gid_attrs/types/<i>`` (the GID table:
  link-local and IPv4-mapped entries, each as RoCE v1 and v2, like mlx5 fills it);
* ``sys/kernel/config/rdma_cm/<dev>/ports/1/default_roce_tos`` (what ``cma_roce_tos`` writes).

Faults (``EmulatedCluster.inject``): ``pcie_width`` (lspci LnkSta width; ``ib_write_bw`` runs
at most ``pcie_gbps`` of that width), ``numa_wrong`` (the
NIC's IRQs pinned to the other node), ``fec_off``, ``link_flaps`` (flaps per second),
``firmware`` (another NIC firmware), ``gid_v1`` (the data IP's GID at the inventory index is
RoCE v1). Standard library and the pure ``tuner.diagnose.parse`` only: the stand-ins
import it on every command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.diagnose.parse import ipv4_gid

NODE_CPUS = {0: "0-15", 1: "16-31"}  # a two-socket host, 16 CPUs per node
NCPUS = 32
NIC_NODE = 0
FIRST_IRQ = 98  # mlx5_async0, then one completion vector per channel
CHANNELS = 8
GID_INDEX = 3  # the inventory's default gid_index: IPv4-mapped, RoCE v2
PCIE_GTS, PCIE_WIDTH = 16.0, 16  # the emulated ConnectX-6: PCIe Gen4 x16 (lspci LnkCap)
MAX_PAYLOAD = 256  # DevCtl MaxPayload the emulated lspci shows


def pcie_gbps(width: int, gts: float = PCIE_GTS, max_payload: int = MAX_PAYLOAD) -> float:
    """What a PCIe link carries of RDMA payload, Gb/s: lanes x rate x line coding (8b/10b up
    to 5 GT/s, 128b/130b from 8 GT/s) x the share of a posted-write TLP that is payload (24
    bytes of TLP header, sequence number and LCRC per MaxPayload bytes). Gen4 x16: 230 Gb/s;
    x8: 115; x4: 58 (a 100G port is capped from x4 on, a 200G port from x8)."""
    coding = 8 / 10 if gts <= 5.0 else 128 / 130
    return width * gts * coding * max_payload / (max_payload + 24)


def net_dir(state: dict[str, Any]) -> str:
    return f"sys/class/net/{state['netdev']}"


def port_dir(state: dict[str, Any]) -> str:
    return f"sys/class/infiniband/{state['rdma_device']}/ports/1"


def irqs() -> list[tuple[int, str]]:
    """``(irq, name)`` of the NIC's vectors (name without the ``@pci:`` suffix)."""
    return [(FIRST_IRQ, "mlx5_async0")] + [
        (FIRST_IRQ + 1 + n, f"mlx5_comp{n}") for n in range(CHANNELS)]


def interrupts_text(pci: str) -> str:
    """``/proc/interrupts`` as kernel/irq/proc.c prints it (a short head of other devices)."""
    head = " " * 11 + "".join(f"CPU{c:<7d}" for c in range(NCPUS)).rstrip()
    zeros = "".join(f"{0:10d} " for _ in range(NCPUS))
    lines = [head, f"  0: {zeros} IR-IO-APIC    2-edge      timer"]
    for i, (irq, name) in enumerate(irqs()):
        lines.append(f"{irq:3d}: {zeros} IR-PCI-MSI {1572864 + i}-edge      {name}@pci:{pci}")
    lines.append(f"NMI: {zeros} Non-maskable interrupts")
    return "\n".join(lines) + "\n"


def _link_local(state: dict[str, Any]) -> str:
    n = int(str(state["name"]).lstrip("host") or 0) % 256
    return f"fe80:0000:0000:0000:ba3f:d2ff:fe10:{n:04x}"


def init(tdir: Path, state: dict[str, Any]) -> None:
    """Create the files of a healthy host (called with the DCQCN tree, on start and reset):
    per rail its netdev files, GID table and rdma_cm ToS; the IRQs of the first rail."""
    from tuner.emulated.hosts import rail_views

    for node, cpus in NODE_CPUS.items():
        _put(tdir / f"sys/devices/system/node/node{node}/cpulist", cpus)
    _put(tdir / "proc/interrupts", interrupts_text(state["pci"]).rstrip("\n"))
    for view in rail_views(state):
        net = tdir / net_dir(view)
        _put(net / "carrier_changes", "2")  # the boot: down, then up
        _put(net / "device/numa_node", str(NIC_NODE))
        zero = "0000:0000:0000:0000:0000:0000:0000:0000"
        port = tdir / port_dir(view)
        mapped = ipv4_gid(view.get("data_address") or view["address"]) or zero
        entries = [_link_local(view), _link_local(view), mapped, mapped]
        for i in range(8):
            _put(port / f"gids/{i}", entries[i] if i < len(entries) else zero)
        for i in range(len(entries)):
            _put(port / f"gid_attrs/types/{i}", "IB/RoCE v1" if i % 2 == 0 else "RoCE v2")
        _put(tdir / f"sys/kernel/config/rdma_cm/{view['rdma_device']}/ports/1/"
             "default_roce_tos", "106")
    apply_faults(tdir, state, {})


def apply_faults(tdir: Path, state: dict[str, Any], faults: dict[str, Any]) -> None:
    """Write the file-backed faults (IRQ pinning, GID type); others are read by the tools."""
    node = 1 - NIC_NODE if faults.get("numa_wrong") else NIC_NODE
    first = int(NODE_CPUS[node].split("-")[0])
    for i, (irq, _) in enumerate(irqs()):
        _put(tdir / f"proc/irq/{irq}/smp_affinity_list", str(first + i % 16))
    kind = "IB/RoCE v1" if faults.get("gid_v1") else "RoCE v2"
    _put(tdir / port_dir(state) / f"gid_attrs/types/{GID_INDEX}", kind)


def sync_carrier(tdir: Path, state: dict[str, Any], counters: dict[str, int]) -> None:
    """``carrier_changes`` = the boot's 2 + two per flap counted so far (the ``link_flaps``
    rate fault ticks like the CRC one: whenever a stand-in reads the port's counters)."""
    _put(tdir / net_dir(state) / "carrier_changes", str(2 + int(counters.get("flaps", 0)) * 2))


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{text}\n")
