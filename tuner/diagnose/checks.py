"""The host-side checks of ``diagnose``, layer by layer (pure: ``HostRead`` in, rows out).

Each check returns findings and "not checked" rows; a missing tool or an unreadable file is
never taken for healthy. The physical and IP checks reuse what pre-flight parses
(``tuner.preflight_facts.parse_host``: speed, FEC, firmware, MTU, ``ethtool -S``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from safety.preflight import _rising
from tuner.diagnose import parse
from tuner.diagnose.finding import Finding, Layer, NotChecked

if TYPE_CHECKING:
    from tuner.diagnose.collect import HostRead

Rows = list[Finding | NotChecked]
Check = Callable[["HostRead"], Rows]


def _missing(text: str) -> str | None:
    """Why a tool gave nothing usable (``command not found``, an error line), else None."""
    t = text.strip()
    if not t:
        return "no output"
    if "command not found" in t or "not found" in t.splitlines()[0]:
        return t.splitlines()[0]
    return None


def _nc(layer: Layer, check: str, r: HostRead, reason: str) -> NotChecked:
    return NotChecked(layer=layer, check=check, where=r.name, reason=reason)


# -- physical -------------------------------------------------------------------------------
def link_speed(r: HostRead) -> Rows:
    speed, up = r.facts.get("speed_mbps"), r.facts.get("link_up")
    want = int(r.entry.nic_gbps * 1000)
    where = f"{r.name}/{r.entry.netdev}"
    if up is False:
        return [Finding(layer="physical", check="link_speed", where=where,
                        evidence="ethtool: Link detected: no", cause="the port is down",
                        action="check the cable, optic and switch port", dominant=True)]
    if speed is None:
        return [_nc("physical", "link_speed", r, "ethtool printed no Speed")]
    if speed < want:
        return [Finding(layer="physical", check="link_speed", where=where,
                        evidence=f"ethtool: Speed: {speed}Mb/s; inventory nic_gbps "
                                 f"{r.entry.nic_gbps:g} ({want}Mb/s)",
                        cause="the link trained below its rated speed (cable/optic, or a "
                              "forced speed on either end)",
                        action="compare both ends (`ethtool`, the switch's interface status); "
                               "replace the cable or fix the speed setting", dominant=True)]
    return []


def fec(r: HostRead) -> Rows:
    active = r.facts.get("fec")
    if active is None:
        why = _missing(r.sections.get("fec", "")) or "no 'Active FEC encoding' line"
        return [_nc("physical", "fec", r, f"ethtool --show-fec: {why}")]
    speed = r.facts.get("speed_mbps") or int(r.entry.nic_gbps * 1000)
    if active.lower() in ("off", "none") and speed >= 25000:
        return [Finding(layer="physical", check="fec", where=f"{r.name}/{r.entry.netdev}",
                        evidence=f"ethtool --show-fec: Active FEC encoding: {active} at "
                                 f"{speed}Mb/s",
                        cause="no forward error correction on a >= 25G link: bit errors reach "
                              "the MAC as CRC drops (often after auto-negotiated FEC)",
                        action=f"`ethtool --set-fec {r.entry.netdev} encoding rs` and the same "
                               "FEC on the switch port")]
    return []


def crc_errors(r: HostRead) -> Rows:
    before, after = r.facts.get("counters_before") or {}, r.counters_after
    if not after or not before:
        return [_nc("physical", "crc_errors", r, "ethtool -S not read twice")]
    up = _rising(before, after)  # pre-flight's rule: rx_crc_errors_phy, rx_symbol_err_phy
    if not up:
        return []
    rising = ", ".join(f"{k} +{v}" for k, v in sorted(up.items()))
    return [Finding(layer="physical", check="crc_errors", where=f"{r.name}/{r.entry.netdev}",
                    evidence=f"ethtool -S over {r.sample_s:.1f} s {r.load}: {rising}",
                    cause="corrupted frames on the wire: dirty or failing optic/cable, or FEC "
                          "off; drops become RDMA retransmits that no ECN setting fixes",
                    action="clean or replace the optic/cable (check `ethtool -m` power, the "
                           "switch port's counters), then re-run diagnose", dominant=True)]


def flaps(r: HostRead) -> Rows:
    try:
        before = int(r.sections.get("carrier", "").strip())
        after = int(r.carrier_after)
    except ValueError:
        return [_nc("physical", "flaps", r, "carrier_changes not readable twice")]
    if after <= before:
        return []
    return [Finding(layer="physical", check="flaps", where=f"{r.name}/{r.entry.netdev}",
                    evidence=f"/sys/class/net/{r.entry.netdev}/carrier_changes {before} -> "
                             f"{after} in {r.sample_s:.1f} s",
                    cause="the link goes down and up: loose or failing cable/optic, or the "
                          "switch port resetting",
                    action="reseat or replace the cable/optic; read the switch's link up/down "
                           "events for the port")]


def optics(r: HostRead) -> Rows:
    text = r.sections.get("optics", "")
    o = parse.parse_optics(text)
    if o is None:
        first = text.strip().splitlines()[0] if text.strip() else "no output"
        return [_nc("physical", "optics", r, f"ethtool -m: no optical power ({first})")]
    low = [f"{lane} {dbm:g} dBm" for lane, dbm in o.rx_dbm.items()
           if o.low_dbm is not None and dbm < o.low_dbm]
    if not low:
        return []
    return [Finding(layer="physical", check="optics", where=f"{r.name}/{r.entry.netdev}",
                    evidence=f"ethtool -m: {', '.join(low)} below the module's low threshold "
                             f"{o.low_dbm:g} dBm",
                    cause="too little light arrives: dirty connector, bent fibre or a failing "
                          "transmitter on the far end",
                    action="clean both connectors, then swap the optic or fibre")]


# -- host -----------------------------------------------------------------------------------
def pcie(r: HostRead) -> Rows:
    text = r.sections.get("pcie", "")
    link = parse.parse_lspci(text)
    if link is None:
        why = _missing(text) or ("no LnkCap/LnkSta (capabilities need root: sudo)"
                                 if "access denied" in text else "no LnkCap/LnkSta")
        return [_nc("host", "pcie_link", r, f"lspci -vvv -s {r.entry.pci}: {why}")]
    if not link.degraded:
        return []
    ctl = (f"; MaxPayload {link.max_payload} bytes, MaxReadReq {link.max_read_req} bytes"
           if link.max_payload else "")
    return [Finding(layer="host", check="pcie_link", where=f"{r.name}/{r.entry.pci}",
                    evidence=f"lspci -vvv: {link.cap_line} | {link.sta_line}{ctl}",
                    cause=f"the NIC's PCIe link runs at x{link.sta_width} {link.sta_speed:g}GT/s "
                          f"of x{link.cap_width} {link.cap_speed:g}GT/s: the slot, a riser or "
                          "seating caps every flow of this host",
                    action="move the NIC to a full-width slot of the right generation, reseat "
                           "it, check the BIOS bifurcation setting", dominant=True)]


def numa(r: HostRead) -> Rows:
    try:
        node = int(r.sections.get("numa", "").strip())
    except ValueError:
        return [_nc("host", "numa_irq", r, "device/numa_node not readable")]
    if node < 0:
        return [_nc("host", "numa_irq", r, "numa_node -1: single node or unknown")]
    nodes = parse.parse_node_cpulists(r.sections.get("nodes", ""))
    irqs = parse.parse_irq_affinity(r.sections.get("irqs", ""))
    if node not in nodes or not irqs:
        return [_nc("host", "numa_irq", r, "no node cpulist or no mlx5_comp IRQs in "
                                           "/proc/interrupts")]
    local = nodes[node]
    remote = {irq: cpus for irq, cpus in sorted(irqs.items()) if not cpus <= local}
    if not remote:
        return []
    shown = ", ".join(f"irq {i} -> {_cpus(c)}" for i, c in list(remote.items())[:4])
    return [Finding(layer="host", check="numa_irq", where=f"{r.name}/{r.entry.netdev}",
                    evidence=f"numa_node {node} (cpulist {_cpus(local)}); {len(remote)} of "
                             f"{len(irqs)} mlx5_comp IRQs on other CPUs: {shown}",
                    cause="completions are handled on the far socket: every packet crosses "
                          "the inter-socket link",
                    action=f"pin the NIC's IRQs to node {node} (`set_irq_affinity_cpulist.sh "
                           f"{_cpus(local)} {r.entry.netdev}` or irqbalance hints) and run the "
                           "job's ranks there")]


def gpu_affinity(r: HostRead) -> Rows:
    text = r.sections.get("gpu", "")
    why = _missing(text)
    if why is not None:
        return [_nc("host", "gpu_nic_affinity", r, f"nvidia-smi topo -m: {why}")]
    topo = parse.parse_topo(text)
    if topo is None:
        return [_nc("host", "gpu_nic_affinity", r, "nvidia-smi topo -m: no GPU matrix")]
    dev = r.entry.rdma_device
    if dev not in topo:
        return [_nc("host", "gpu_nic_affinity", r, f"nvidia-smi topo -m: {dev} not in the "
                                                    "matrix (no NIC legend?)")]
    rel = {g: c for g, c in topo[dev].items() if c in parse.TOPO_RANK}
    best = min(rel.values(), key=parse.TOPO_RANK.__getitem__, default=None)
    if best is None or parse.TOPO_RANK[best] <= parse.TOPO_RANK["PHB"]:
        return []
    shown = ", ".join(f"{g} {c}" for g, c in rel.items())
    crosses = "sockets" if best == "SYS" else "host bridges"
    return [Finding(layer="host", check="gpu_nic_affinity", where=f"{r.name}/{dev}",
                    evidence=f"nvidia-smi topo -m, {dev}: {shown}",
                    cause=f"no GPU shares a PCIe switch or host bridge with {dev} (best: "
                          f"{best}): GPUDirect RDMA crosses the {crosses}",
                    action="use the NIC next to the GPUs (NCCL_IB_HCA), or move the NIC/GPUs "
                           "so each GPU has a PIX/PXB NIC")]


# -- ip -------------------------------------------------------------------------------------
def mtu_path(r: HostRead, mtus: dict[str, int | None]) -> Rows:
    if r.ping is None:
        return [_nc("ip", "mtu_path", r, "no peer to ping")]
    peer, res = r.ping
    if res is None:
        return [_nc("ip", "mtu_path", r, "ping: command not found")]
    if res == "ok":
        return []
    seen = ", ".join(f"{n} mtu {m}" for n, m in mtus.items() if m)
    return [Finding(layer="ip", check="mtu_path", where=f"{r.name}->{peer}",
                    evidence=f"ping -M do -I {r.entry.netdev} at the largest MTU: {res}; {seen}",
                    cause="a host or switch port on the path has a smaller MTU: RoCE frames of "
                          "the negotiated size are dropped",
                    action="set one MTU end to end (hosts' netdev MTU and every switch port)",
                    dominant=True)]


# -- rdma -----------------------------------------------------------------------------------
def port_active(r: HostRead) -> Rows:
    st = parse.port_state(r.sections.get("ibmtu", ""))
    if st is None:
        why = _missing(r.sections.get("ibmtu", "")) or "no state line"
        return [_nc("rdma", "port_active", r, f"ibv_devinfo: {why}")]
    if st == "PORT_ACTIVE":
        return []
    return [Finding(layer="rdma", check="port_active",
                    where=f"{r.name}/{r.entry.rdma_device}",
                    evidence=f"ibv_devinfo -d {r.entry.rdma_device}: state: {st}",
                    cause="the RDMA port is not active (link down or driver not bound)",
                    action="bring the link up; check `rdma link show` and dmesg",
                    dominant=True)]


def gid(r: HostRead) -> Rows:
    gids = parse.parse_gids(r.sections.get("gids", ""))
    address = r.entry.data_address or r.entry.address
    want = parse.ipv4_gid(address)
    if not gids or want is None:
        return [_nc("rdma", "gid", r, "no GID table read" if not gids
                    else f"data address {address} is not IPv4")]
    at = {g.index: g for g in gids}
    ok = [g.index for g in gids if g.gid == want and g.type == "RoCE v2"]
    cur = at.get(r.entry.gid_index)
    if cur is not None and cur.gid == want and cur.type == "RoCE v2":
        return []
    shown = f"gids/{r.entry.gid_index} = " + (f"{cur.gid} ({cur.type})" if cur else "empty")
    return [Finding(layer="rdma", check="gid", where=f"{r.name}/{r.entry.rdma_device}",
                    evidence=f"{shown}; the RoCE v2 GID of {address} is "
                             + (f"index {ok[0]}" if ok else "missing"),
                    cause="the GID index the jobs use is not RoCE v2 on the data address: "
                          "traffic goes out as RoCE v1 (no IP/ECN) or from another address",
                    action=(f"set gid_index {ok[0]} in the inventory and NCCL_IB_GID_INDEX={ok[0]}"
                            if ok else "configure the data address on the RoCE netdev"))]


def cma_tos(r: HostRead, roce_dscp: int) -> Rows:
    text = r.sections.get("cma_tos", "").strip()
    if not text.isdigit():
        return [_nc("rdma", "cma_roce_tos", r, "rdma_cm configfs default_roce_tos not present "
                                               "(cma_roce_tos never run)")]
    tos = int(text)
    if tos >> 2 == roce_dscp:
        return []
    return [Finding(layer="rdma", check="cma_roce_tos", where=f"{r.name}/{r.entry.rdma_device}",
                    evidence=f"default_roce_tos {tos} = DSCP {tos >> 2}; RoCE DSCP {roce_dscp}",
                    cause="RDMA-CM connections (perftest -R, NCCL over rdma_cm) leave with "
                          "another DSCP: they miss the lossless queue and ECN",
                    action=f"`cma_roce_tos -d {r.entry.rdma_device} -t {roce_dscp * 4 + 2}`")]


# -- collectives ----------------------------------------------------------------------------
def versions(reads: list[HostRead]) -> tuple[dict[str, dict[str, str]], Rows]:
    """Per-host versions and a finding for each that drifts from the others."""
    table = {r.name: {"firmware": r.facts.get("firmware") or "?",
                      "driver": r.facts.get("driver") or "?"}
             for r in reads if r.error is None}
    rows: Rows = []
    for key in ("firmware", "driver"):
        seen: dict[str, list[str]] = {}
        for name, row in table.items():
            if row[key] != "?":
                seen.setdefault(row[key], []).append(name)
        if len(seen) < 2:
            continue
        common = max(seen, key=lambda v: len(seen[v]))
        shown = "; ".join(f"{v}: {', '.join(hs)}" for v, hs in sorted(seen.items()))
        for value, hs in sorted(seen.items()):
            if value != common:
                rows += [Finding(layer="collectives", check=f"{key}_drift", where=h,
                                 evidence=f"ethtool -i {key}: {shown}",
                                 cause=f"NIC {key} versions differ between hosts: behaviour "
                                       "(congestion control, bugs) differs per host",
                                 action=f"bring every host to one {key} ({common})")
                         for h in hs]
    return table, rows


def _cpus(cpus: set[int]) -> str:
    out: list[list[int]] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(run)
            run = []
        run.append(c)
    if run:
        out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


PER_HOST: tuple[tuple[Layer, Check], ...] = (
    ("physical", link_speed), ("physical", fec), ("physical", crc_errors),
    ("physical", flaps), ("physical", optics), ("host", pcie), ("host", numa),
    ("host", gpu_affinity), ("rdma", port_active), ("rdma", gid))
