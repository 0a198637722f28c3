"""Reading the hosts for ``diagnose`` over SSH (the I/O edge; the checks are pure).

One command per host prints pre-flight's sections (``tuner.preflight_facts.host_command``:
``ip link``, ``ethtool``, ``ethtool -i``, ``ethtool --show-fec``, ``ibv_devinfo``, ``ethtool -S``
...) and diagnose's own (``lspci -vvv``, NUMA node and IRQ affinity, the GID table,
``cma_roce_tos``, ``ethtool -m``, ``nvidia-smi topo -m``, ``carrier_changes``), each allowed to
fail alone. After ``sample_s`` a second command reads the error counters and
``carrier_changes`` again; then each host pings the next one's data address with don't-fragment
at the largest MTU of the canary, from its data port. The canary switches are read in the same
two reads (``tuner.diagnose.switch``: interface status, counters, OS version). Every value
reaching the remote shell is validated and quoted (``tuner.ssh.shell``).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.preflight_facts import MARK, _ping, _stats, host_command, parse_host, split_sections
from tuner.ssh.shell import check, q

if TYPE_CHECKING:
    from tuner.diagnose.switch import SwitchRead
    from tuner.inventory import HostEntry, SwitchEntry


@dataclass
class HostRead:
    """What one host answered. ``error``: it could not be read at all (unreachable)."""

    name: str
    entry: HostEntry
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # preflight_facts.parse_host fields
    sections: dict[str, str] = field(default_factory=dict)  # raw text per section
    counters_after: dict[str, int] = field(default_factory=dict)
    carrier_after: str = ""
    sample_s: float = 0.0
    ping: tuple[str, str | None] | None = None  # (peer, "ok"/failure/None = no ping)
    load: str = "idle"  # what ran during the counter window ("under load: ..." with --load)
    load_error: str | None = None  # --load was asked for and could not run


def _sections(parts: dict[str, str]) -> str:
    return "; ".join(f"echo {shlex.quote(MARK.format(k))}; {{ {cmd}; }} 2>&1 || true"
                     for k, cmd in parts.items())


def diag_parts(h: HostEntry) -> dict[str, str]:
    """diagnose's own sections (pre-flight's come from ``host_command``)."""
    dev = q("netdev", h.netdev)
    net = h.sys_path(f"/sys/class/net/{check('netdev', h.netdev)}")
    ibdev = check("rdma_device", h.rdma_device)
    port = h.sys_path(f"/sys/class/infiniband/{ibdev}/ports/{int(h.rdma_port)}")
    tos = h.sys_path(f"/sys/kernel/config/rdma_cm/{ibdev}/ports/{int(h.rdma_port)}"
                     "/default_roce_tos")
    proc = h.sys_path("/proc")
    zero = "0000:0000:0000:0000:0000:0000:0000:0000"
    return {
        "pcie": f"lspci -vvv -s {q('pci', h.pci)}",
        "carrier": f"cat {q('path', net + '/carrier_changes')}",
        "numa": f"cat {q('path', net + '/device/numa_node')}",
        "nodes": f"grep -H '' {q('path', h.sys_path('/sys/devices/system/node'))}/node*/cpulist",
        # the completion vectors of this PCI function (mlx5_comp<n>@pci:<bdf>) and their CPUs
        "irqs": (f"for i in $(grep -F @pci:{check('pci', h.pci)} "
                 f"{q('path', proc + '/interrupts')} | "
                 r"sed -n 's/^ *\([0-9][0-9]*\):.*mlx5_comp.*/\1/p'); do "
                 f"echo \"$i $(cat {q('path', proc + '/irq')}/$i/smp_affinity_list)\"; done"),
        "gids": (f"cd {q('path', port)} && for f in gids/*; do n=${{f#gids/}}; "
                 f"g=$(cat $f 2>/dev/null) || continue; [ \"$g\" = {zero} ] && continue; "
                 "echo \"$n $g $(cat gid_attrs/types/$n 2>/dev/null)\"; done"),
        "cma_tos": f"cat {q('path', tos)}",
        "optics": f"ethtool -m {dev}",
        "gpu": "nvidia-smi topo -m",
    }


def host_read_command(h: HostEntry) -> str:
    """The first read: pre-flight's sections, then diagnose's."""
    return host_command(h) + "; " + _sections(diag_parts(h))


def resample_command(h: HostEntry) -> str:
    """The second read, ``sample_s`` later: error counters and carrier changes."""
    net = h.sys_path(f"/sys/class/net/{check('netdev', h.netdev)}")
    return _sections({"stats": f"ethtool -S {q('netdev', h.netdev)}",
                      "carrier": f"cat {q('path', net + '/carrier_changes')}"})


def switch_command(sw: SwitchEntry, second: bool = False) -> str:
    """A switch's first read, or (``second``) its counters again ``sample_s`` later."""
    from tuner.diagnose.switch import first_parts, second_parts

    return _sections(second_parts(sw) if second else first_parts(sw))


def read_hosts(cluster: Any, sample_s: float, ping: bool = True, load: bool = False
               ) -> tuple[list[HostRead], list[SwitchRead]]:
    """Read every inventory host and switch (``cluster``: a ``tuner.cluster.ssh.SshCluster``);
    the switches' counters in the same window as the hosts'. With ``load`` the window runs
    under ``ib_write_bw`` flows (``tuner.diagnose.load``)."""
    from tuner.diagnose.switch import SwitchRead

    inv = cluster.inventory
    pool = cluster.pool
    hosts = {h.name: h for h in inv.hosts}
    sws = {s.name: s for s in inv.switches}
    reads = {n: HostRead(n, h) for n, h in hosts.items()}
    sreads = {n: SwitchRead(n, s) for n, s in sws.items()}

    def first_cmd(name: str) -> str:
        return host_read_command(hosts[name]) if name in hosts else switch_command(sws[name])

    def second_cmd(name: str) -> str:
        return resample_command(hosts[name]) if name in hosts else switch_command(sws[name], True)

    t0 = time.monotonic()
    first = pool.fan_out(lambda c: c.run(first_cmd(c.name), check=False).stdout,
                         [*hosts, *sws])
    for name, o in first.items():
        if name in sws:
            sreads[name].error = None if o.error is None else str(o.error)
            sreads[name].first = split_sections(o.value or "") if o.error is None else {}
            continue
        if o.error is not None:
            reads[name].error = str(o.error)
            continue
        text = o.value or ""
        reads[name].sections = split_sections(text)
        reads[name].facts = parse_host(hosts[name], text)
    live = [n for n, r in reads.items() if r.error is None]
    live_sw = [n for n, r in sreads.items() if r.error is None]
    flows = None
    if load:
        from tuner.diagnose.load import Load

        flows = Load().start(cluster, live, max(1.0, sample_s))
        t0 = time.monotonic()  # the window starts once the flows run
        for n in live:
            reads[n].load = f"under ib_write_bw load ({flows.flows} flows)"
            reads[n].load_error = flows.error
    wait = sample_s - (time.monotonic() - t0)
    if wait > 0 and (live or live_sw):
        time.sleep(wait)
    try:
        second = pool.fan_out(
            lambda c: c.run(second_cmd(c.name), check=False).stdout, [*live, *live_sw])
    finally:
        if flows is not None:
            flows.stop()
    for name, o in second.items():
        sec = split_sections(o.value or "") if o.error is None else {}
        if name in sws:
            sreads[name].second = sec
            sreads[name].sample_s = time.monotonic() - t0
            continue
        reads[name].counters_after = _stats(sec.get("stats", ""))
        reads[name].carrier_after = sec.get("carrier", "").strip()
        reads[name].sample_s = time.monotonic() - t0
    if ping and len(live) > 1:
        mtu = max((reads[n].facts.get("mtu") or 0 for n in live), default=0)
        pairs = dict(zip(live, live[1:] + live[:1], strict=True))
        if mtu:
            res = pool.fan_out(
                lambda c: _ping(c, hosts[c.name], hosts[pairs[c.name]], mtu), live)
            for a, o in res.items():
                reads[a].ping = (pairs[a], o.value if o.error is None else str(o.error))
    return [reads[n] for n in hosts], [sreads[n] for n in sws]
