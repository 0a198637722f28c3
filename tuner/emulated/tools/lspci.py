"""Stand-in ``lspci -vvv -s <bdf>``: the NIC's PCI Express capability block.

Layout and wording are pciutils' (ls-caps.c ``cap_express_dev``/``cap_express_link``: tab
indents, ``LnkSta:\\tSpeed %s%s, Width x%d%s`` with `` (ok)``/`` (downgraded)``; see
docs/reference-notes/diagnose-formats.md). A ConnectX-6 in a Gen4 x16 slot; the ``pcie_width``
fault makes the link train narrower. A ``-s`` that matches nothing prints nothing (exit 0),
as lspci does.
"""

from __future__ import annotations

import sys

from tuner.emulated.hostdiag import PCIE_GTS, PCIE_WIDTH
from tuner.emulated.tools._base import target

CAP_WIDTH, SPEED = PCIE_WIDTH, f"{PCIE_GTS:g}GT/s"


def block(bdf: str, numa_node: int, width: int) -> str:
    sta = " (ok)" if width == CAP_WIDTH else " (downgraded)"
    return (
        f"{bdf} Ethernet controller: Mellanox Technologies MT28908 Family [ConnectX-6]\n"
        "\tSubsystem: Mellanox Technologies Device 0007\n"
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- "
        "SERR- FastB2B- DisINTx+\n"
        "\tLatency: 0, Cache Line Size: 64 bytes\n"
        f"\tNUMA node: {numa_node}\n"
        "\tRegion 0: Memory at 2bffe000000 (64-bit, prefetchable) [size=32M]\n"
        "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
        "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s unlimited, L1 unlimited\n"
        "\t\t\tExtTag+ AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 75.000W\n"
        "\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+\n"
        "\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-\n"
        "\t\t\tMaxPayload 256 bytes, MaxReadReq 4096 bytes\n"
        "\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-\n"
        f"\t\tLnkCap:\tPort #0, Speed {SPEED}, Width x{CAP_WIDTH}, ASPM not supported\n"
        "\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+\n"
        "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+\n"
        "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
        f"\t\tLnkSta:\tSpeed {SPEED} (ok), Width x{width}{sta}\n"
        "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-\n"
        "\tCapabilities: [48] Vital Product Data\n"
        "\tKernel driver in use: mlx5_core\n"
        "\tKernel modules: mlx5_core\n")


def main(argv: list[str]) -> int:
    t = target("lspci")
    s = t.state
    if s["kind"] != "host":
        print("bash: lspci: command not found", file=sys.stderr)
        return 127
    want = argv[argv.index("-s") + 1] if "-s" in argv and argv.index("-s") + 1 < len(argv) \
        else None
    pci = str(s["pci"])
    short = pci.split(":", 1)[1] if pci.count(":") == 2 else pci
    if want not in (None, pci, short):
        return 0
    width = int(t.faults.get("pcie_width") or CAP_WIDTH)
    print(block(short, 0, width), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
