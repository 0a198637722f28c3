"""The RDMA layer's single-QP bandwidth test: one ``ib_write_bw`` flow per host (and rail) to
the next host in inventory order, all at once, each one QP, 64 KiB writes, ``-D`` seconds, no
rate limit, in the RoCE class; built by the measurement's own perftest command builder
(``tuner.ssh.plan``) and read with the perftest parser (``objectives.parsers``).

Why it separates a host problem from a fabric problem: in the ring every host sends one flow
and receives one, over different paths. A host whose PCIe link or memory placement is short
slows both of its flows; a slow path slows one flow whose two ends are fine in their other
flow. So a host whose flows are all slow is named (host cause), a slow flow between two hosts
that are fast elsewhere names its path (fabric cause), and when every flow is slow the test
cannot tell the two apart and says so.

Threshold: a flow is slow below ``THRESHOLD`` (80 %) of the line rate of its slower end. A
healthy single RC QP writing 64 KiB reaches 92-98 % of the line: per 4096-byte RoCE payload the
wire carries 82 more bytes (preamble and gap 20, Ethernet 14 + FCS 4, IPv4 20, UDP 8, BTH 12,
ICRC 4): 98 % at MTU 4096, 93 % at MTU 1024. A PCIe link one step too narrow carries about
60 % (Gen4 x8: 16 GT/s x 8 x 128/130 x 256/280 of MaxPayload 256 = 115 Gb/s, 58 % of 200G;
Gen3 x8 or Gen4 x4 on 100G: 58 %). 80 % lies between the two with room for the 1024-byte MTU
and run-to-run noise on each side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.diagnose.finding import Finding, NotChecked
from tuner.ssh.plan import Flow, _peer, _perftest_base, join, on_rail

if TYPE_CHECKING:
    from tuner.inventory import Inventory

THRESHOLD = 0.8
PORT = 18915  # flow k listens on PORT + k (clear of the measurement's probe and flow ports)
CHECK = "single_qp_bw"
Rows = list[Finding | NotChecked]


@dataclass(frozen=True)
class BwFlow:
    """One flow: its ends (``host/rdma_device``), the line rate of its slower end, and what
    it measured (``gbps``) or why it did not (``error``)."""

    sender: str
    receiver: str
    line_gbps: float
    gbps: float | None = None
    error: str | None = None

    @property
    def slow(self) -> bool:
        return self.gbps is not None and self.gbps < THRESHOLD * self.line_gbps


def bw_flows(inv: Inventory, seconds: int) -> list[tuple[Flow, BwFlow]]:
    """The flows to run: host i sends to host i+1 on every rail both have."""
    la = inv.launcher
    hosts = list(inv.hosts)
    extra = ["-q", "1", "-D", str(int(seconds)), "-s", "65536", "--report_gbits"]
    out: list[tuple[Flow, BwFlow]] = []
    for i, a in enumerate(hosts):
        b = hosts[(i + 1) % len(hosts)]
        for k in range(min(len(a.rail_entries()), len(b.rail_entries()))):
            send, recv = on_rail(a, b, k)
            port = PORT + len(out)
            flow = Flow(recv.name, join(_perftest_base(inv, la.bw_bin, recv, la.roce_tos, port)
                                        + extra),
                        send.name, join(_perftest_base(inv, la.bw_bin, send, la.roce_tos, port)
                                        + extra + [_peer(recv)]), port)
            out.append((flow, BwFlow(f"{send.name}/{send.rdma_device}",
                                     f"{recv.name}/{recv.rdma_device}",
                                     min(send.nic_gbps, recv.nic_gbps))))
    return out


def measure(cluster: Any, names: list[str], seconds: int) -> list[BwFlow]:
    """Run the flows among the reachable hosts ``names`` (``cluster``: an ``SshCluster``).
    Perftest runs as the login user, never under sudo, as in a measurement."""
    from dataclasses import replace

    from objectives.parsers import parse_perftest
    from tuner.ssh.measure import _stop, _tail, _wait_listening

    inv = cluster.inventory
    live = inv.model_copy(update={"hosts": [h for h in inv.hosts if h.name in names]})
    planned = bw_flows(live, seconds)
    pool, limit = cluster.pool, seconds + 30
    servers: list[Any] = []
    try:
        servers = [pool[f.server].start(f.server_cmd, timeout_s=limit, sudo=False)
                   for f, _ in planned]
        _wait_listening(servers)
        clients = [pool[f.client].start(f.client_cmd, timeout_s=limit, sudo=False)
                   for f, _ in planned]
        out = []
        for (_, b), client in zip(planned, clients, strict=True):
            res = client.wait(check=False)
            try:
                rows = parse_perftest(res.stdout).run.bandwidth if res.status == 0 else []
            except Exception:  # noqa: BLE001 - unreadable output is "not checked"
                rows = []
            out.append(replace(b, gbps=rows[-1].bw_average_gbps) if rows else
                       replace(b, error=f"{live.launcher.bw_bin} exit {res.status}: "
                                        f"{_tail(res.stderr or res.stdout)}"))
        return out
    except Exception as exc:  # noqa: BLE001 - no flow is a "not checked", not a crash
        return [replace(b, error=f"could not start: {exc}") for _, b in planned]
    finally:
        _stop(*servers)


def rows(flows: list[BwFlow]) -> Rows:
    """Findings from the measured flows (pure): slow hosts, slow paths, or a slow canary."""
    out: Rows = [NotChecked(layer="rdma", check=CHECK, where=f"{f.sender}->{f.receiver}",
                            reason=f.error or "no bandwidth") for f in flows if f.gbps is None]
    done = [f for f in flows if f.gbps is not None]
    slow = [f for f in done if f.slow]
    if not slow:
        return out
    ends: dict[str, list[BwFlow]] = {}
    for f in done:
        ends.setdefault(f.sender, []).append(f)
        ends.setdefault(f.receiver, []).append(f)
    if len(slow) == len(done) and len(done) > 1:
        return out + [_finding(
            "canary", slow, dominant=False,
            cause="every flow is below the line rate: a cap all paths share (switch ports "
                  "below speed, PFC pausing, other traffic) or every host alike (same slot, "
                  "same BIOS); this test cannot tell which",
            action="compare with the switch ports' speed and pause counters; run "
                   "`ib_write_bw` between two hosts on one leaf")]
    hosts = sorted(e for e, fl in ends.items() if len(fl) > 1 and all(f.slow for f in fl))
    for h in hosts:
        out.append(_finding(
            h, ends[h], dominant=True,
            cause="both of this host's flows are slow while their other ends are fast "
                  "elsewhere: the host caps a single QP (PCIe link narrower or slower than "
                  "the NIC's, NIC far from the memory/CPU the process uses, a host-side "
                  "rate limit)",
            action="read this host's pcie_link and numa_irq rows; seat the NIC in a full "
                   "x16 slot of its generation, run the job's ranks on the NIC's NUMA node"))
    for f in slow:
        if f.sender not in hosts and f.receiver not in hosts:
            out.append(_finding(
                f"{f.sender}->{f.receiver}", [f], dominant=False,
                cause="this path is slow while both of its hosts are fast in their other "
                      "flow: a hop between them (a switch port below speed or with errors, "
                      "an uplink shared with other traffic, PFC pausing)",
                action="read the switch rows for the ports of this path; rerun diagnose "
                       "when the fabric is quiet"))
    return out


def _finding(where: str, flows: list[BwFlow], dominant: bool, cause: str, action: str
             ) -> Finding:
    shown = "; ".join(f"{f.sender} -> {f.receiver} {f.gbps:.2f} Gb/s of {f.line_gbps:g} "
                      f"({100 * (f.gbps or 0) / f.line_gbps:.0f} %)" for f in flows)
    return Finding(layer="rdma", check=CHECK, where=where,
                   evidence=f"ib_write_bw, 1 QP, 64 KiB writes, flows at once: {shown}; "
                            f"slow below {THRESHOLD:.0%} of the line rate",
                   cause=cause, action=action, dominant=dominant)
