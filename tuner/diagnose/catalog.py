"""Every command ``ecntune diagnose`` runs on a host, for an inventory (Markdown).

``python -m tuner.diagnose.catalog INVENTORY.yaml`` prints it; docs/real-cluster.md shows it for
its example inventory and a test keeps the two in step. The commands are built by the same
functions ``diagnose`` calls (``tuner.diagnose.collect``), so the list cannot drift.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.diagnose.bw import bw_flows
from tuner.diagnose.collect import diag_parts, resample_command, switch_command
from tuner.diagnose.load import load_flows
from tuner.preflight_facts import _ping

if TYPE_CHECKING:
    from tuner.inventory import HostEntry, Inventory, SwitchEntry
    from tuner.ssh.plan import Flow

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


SW_PURPOSE = {"version": "the OS build (tabulated per switch, drift flagged)",
              "status": "oper state and speed of the ports (the canary ports are checked)",
              "counters": "RX_ERR/TX_ERR of the ports, read again after the sample",
              "flap": "the flap count of the ports, read again after the sample (SONiC "
                      "202505 and later; older releases: not checked)"}


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
    bw = [f for f, _ in bw_flows(inv, 2)] if len(hosts) > 1 else []
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
        lines += _flow_lines(flows, h.name, "with `--load`, during the window (`-D` = "
                             "`--sample-s`, 2 here), {role} one flow (stopped after the "
                             "second read)" + sudo)
        if len(hosts) > 1:
            peer = hosts[(i + 1) % len(hosts)]
            lines.append(f"- MTU end to end, to {peer.name} (at the largest netdev MTU of the "
                         f"canary; {mtu} here){sudo}: `{ping_command(h, peer, mtu)}`")
        lines += _flow_lines(bw, h.name, "single-QP bandwidth, after the ping (`-D` = "
                             "`--bw-s`, 2 here), {role} one flow, as the login user (never "
                             "under sudo, as perftest in a measurement)")
        lines.append("")
    if len(hosts) > 1:
        lines += _collectives(inv)
    for sw in inv.switches:
        lines += _switch(sw)
    return "\n".join(lines)


def _collectives(inv: Inventory) -> list[str]:
    """The nccl-tests runs of the collectives layer, on the launcher host (``--collectives``)."""
    from tuner.diagnose.nccl import runs_of
    from tuner.ssh.plan import nccl_command
    from tuner.workload import CollectivePart

    part = CollectivePart(op="all_reduce", size_bytes=4_194_304, iterations=5)
    what = {"as chosen": "as the job runs it, NCCL naming its choice (TUNING lines)",
            "Ring": "Ring forced", "Tree": "Tree forced"}
    lines = [f"#### {inv.launcher.host} (launcher)", "",
             "- the collectives layer, last (`--collectives`, the default), for each all_reduce "
             "part of the workload (example: 4 MiB, 5 iterations), one run at a time, as the "
             "login user:"]
    lines += [f"  - {what[name]}: `{nccl_command(i, p)}`"
              for name, (i, p) in runs_of(inv, part).items()]
    return [*lines, ""]


def _flow_lines(flows: list[Flow], host: str, what: str) -> list[str]:
    """One line per perftest end on ``host``: ``what`` (with ``{role}``), then the command."""
    return [f"- {what.format(role=role)}: `{cmd}`" for f in flows
            for name, cmd, role in ((f.server, f.server_cmd, "serves"),
                                    (f.client, f.client_cmd, "sends")) if name == host]


def _switch(sw: SwitchEntry) -> list[str]:
    from tuner.diagnose.switch import first_parts

    sudo = " — under `sudo -n`" if sw.sudo else ""
    lines = [f"#### {sw.name} ({sw.platform} switch)", "",
             f"- first read, in the same window as the hosts' first read, one command whose "
             f"sections may each fail alone{sudo}:"]
    ports = dict(enumerate(sw.canary_ports))
    for key, cmd in first_parts(sw).items():
        what = SW_PURPOSE.get(key) or (
            f"state, speed, in-errors/out-errors and carrier-transitions of "
            f"{ports[int(key.removeprefix('link'))]}, read again after the sample")
        lines.append(f"  - {what}: `{cmd}`")
    lines += [f"- `--sample-s` later (error counters and flaps again){sudo}: "
              f"`{switch_command(sw, second=True)}`", ""]
    return lines


def main(argv: list[str]) -> int:
    from tuner.inventory import load_inventory

    if len(argv) != 1:
        print("usage: python -m tuner.diagnose.catalog INVENTORY.yaml", file=sys.stderr)
        return 2
    print(render(load_inventory(argv[0])), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
