"""Every command ``ecntune diagnose`` runs on a host, for an inventory (Markdown).

``python -m tuner.diagnose.catalog INVENTORY.yaml`` prints it; docs/real-cluster.md shows it for
its example inventory and a test keeps the two in step. The commands are built by the same
functions ``diagnose`` calls (``tuner.diagnose.collect``), so the list cannot drift.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.diagnose.collect import diag_parts, resample_command
from tuner.diagnose.load import load_flows
from tuner.preflight_facts import _ping

if TYPE_CHECKING:
    from tuner.inventory import HostEntry, Inventory

# Why each section may need root on a real host (the rest read world-readable files or run as
# any user). Every command runs under `sudo -n` when the host's inventory entry says sudo: true.
ROOT = {"pcie": "needs root: without it lspci prints `Capabilities: <access denied>`, "
                "reported as not checked",
        "optics": "needs root: reading the module EEPROM takes CAP_NET_ADMIN"}
PURPOSE = {"pcie": "PCIe link of the NIC: LnkCap vs LnkSta, DevCtl MaxPayload/MaxReadReq",
           "carrier": "link flaps: carrier_changes, read again after the sample",
           "numa": "NUMA node of the NIC", "nodes": "CPUs of each NUMA node",
           "irqs": "CPUs each mlx5_comp IRQ of this PCI function is pinned to",
           "gids": "the GID table: index, GID, RoCE version",
           "cma_tos": "ToS of RDMA-CM connections (what cma_roce_tos set)",
           "optics": "received optical power and the module's thresholds",
           "gpu": "GPU-NIC affinity matrix (where NVIDIA GPUs are)"}


@dataclass
class _Said:
    """A stand-in connection that records the command instead of running it."""

    command: str = ""
    status: int = 0
    stdout: str = ""
    stderr: str = ""

    def run(self, command: str, **_: object) -> _Said:
        self.command = command
        return self


def ping_command(h: HostEntry, peer: HostEntry, mtu: int) -> str:
    said = _Said()
    _ping(said, h, peer, mtu)  # type: ignore[arg-type]
    return said.command


def render(inv: Inventory, mtu: int = 9000) -> str:
    hosts = list(inv.hosts)
    lines = []
    flows = load_flows(inv, 2.0) if len(hosts) > 1 else []
    for i, h in enumerate(hosts):
        sudo = " — under `sudo -n`" if h.sudo else ""
        lines += [f"#### {h.name}", "",
                  f"- first read: pre-flight's host command (above, \"pre-flight facts\"), then "
                  f"in the same command these sections, each allowed to fail alone{sudo}:"]
        for key, cmd in diag_parts(h).items():
            note = f"; {ROOT[key]}" if key in ROOT else ""
            lines.append(f"  - {PURPOSE[key]}{note}: `{cmd}`")
        lines.append(f"- `--sample-s` later (error counters and flaps again){sudo}: "
                     f"`{resample_command(h)}`")
        for f in flows:
            for host, cmd, role in ((f.server, f.server_cmd, "serves"),
                                    (f.client, f.client_cmd, "sends")):
                if host == h.name:
                    lines.append(f"- with `--load`, during the window (`-D` = `--sample-s`, "
                                 f"2 here), {role} one flow (stopped after the second read)"
                                 f"{sudo}: `{cmd}`")
        if len(hosts) > 1:
            peer = hosts[(i + 1) % len(hosts)]
            lines.append(f"- MTU end to end, to {peer.name} (at the largest netdev MTU of the "
                         f"canary; {mtu} here){sudo}: `{ping_command(h, peer, mtu)}`")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from tuner.inventory import load_inventory

    if len(argv) != 1:
        print("usage: python -m tuner.diagnose.catalog INVENTORY.yaml", file=sys.stderr)
        return 2
    print(render(load_inventory(argv[0])), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
