"""Stand-in perftest ``ib_write_bw`` (RoCE): background flows that load the emulated fabric.

Server (no peer) waits for a client on its port; the client (``ib_write_bw [opts] <server>``)
needs that server. With ``-D S`` the client sends for S seconds of real time (or until it is
stopped), announcing one flow at its ``--rate_limit`` (default: line rate; never more than the
PCIe links of both ends carry, ``hostdiag.pcie_gbps`` of the ``pcie_width`` fault) in the class
of its ``--tclass`` (DSCP 26 = the RoCE class, anything else the other class); every rocesim
run of a concurrent emulated ``mpirun`` or probe carries that flow. The command line is judged
by the real binary where it is installed; ``-T`` needs ``-R``. Output: REPORT_FMT of
shared/reference/perftest/FORMAT-NOTES.md (``-D``: BW peak 0.00 and its warning).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tuner.emulated import fabric, hostdiag
from tuner.emulated import state as st
from tuner.emulated.tools._base import Target
from tuner.emulated.tools._perftest import LINE, banner, connect, finish, run

TOOL = "ib_write_bw"
ROCE_DSCP = 26  # the emulated hosts trust DSCP 26 -> priority 3


SETTINGS = [" PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128",
            " CQ Moderation   : 1"]


def _render(o: dict[str, Any], local: dict[str, Any], remote: dict[str, Any],
            stats: dict[str, Any]) -> str:
    return banner("RDMA_Write BW Test", SETTINGS, 0, o, local, remote) + _report(o, stats)


def _report(o: dict[str, Any], r: dict[str, Any]) -> str:
    unit = "Gb/sec" if o["gbits"] else "MiB/sec"
    bw = r["gbps"] if o["gbits"] else r["gbps"] * 1e9 / 8 / 2**20
    peak = 0.0 if o["duration"] else bw
    mpps = r["gbps"] * 1e9 / 8 / o["size"] / 1e6
    warn = " WARNING: BW peak won't be measured in this run.\n" if o["duration"] else ""
    head = (f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   "
            "MsgRate[Mpps]")
    row = (f" {o['size']:<7d}    {r['iters']:<10d}       {peak:<7.2f}            {bw:<7.2f}"
           f"\t\t     {mpps:<7.6f}")
    return f"{warn}{head}\n{row}\n{LINE}\n"


def _pcie_cap(faults: dict[str, Any]) -> float:
    """The sender reads host memory over its PCIe link and the receiver writes it over its
    own: a narrower link than the NIC's caps the flow (``pcie_width`` fault)."""
    return hostdiag.pcie_gbps(int(faults.get("pcie_width") or hostdiag.PCIE_WIDTH))


def main(argv: list[str]) -> int:
    return run(TOOL, argv, _render, _client)


def _client(t: Target, o: dict[str, Any]) -> int:
    name, peer = connect(t, o, TOOL)
    line = float(t.state.get("speed_mbps", 100_000)) / 1000
    gbps = min(line, o["rate"]) if o["rate"] else line
    gbps = min(gbps, _pcie_cap(t.faults), _pcie_cap(st.load_faults(t.root / name)))
    seconds = float(o["duration"]) if o["duration"] else o["iters"] * o["size"] * 8 / (gbps * 1e9)
    flow = {"src": t.state["rocesim_nic"], "dst": peer["rocesim_nic"], "load": gbps / line,
            "priority": "roce" if o["tclass"] >> 2 == ROCE_DSCP else "other",
            "start": time.time(), "end": time.time() + seconds}
    with fabric.traffic(t.root, "bw", flow):
        time.sleep(seconds)
    iters = int(seconds * gbps * 1e9 / 8 / o["size"]) if o["duration"] else o["iters"]
    return finish(t, o, name, peer, {"gbps": gbps, "iters": iters}, _render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
