"""Collecting pre-flight facts: from the simulated fabric, or over SSH from real devices.

The checks themselves are pure (``safety.preflight``); this module is the I/O edge. Over SSH
every host answers one command (sections separated by markers, each tool allowed to fail on
its own so one missing tool does not hide the rest), error counters are read twice
``error_sample_s`` apart, and consecutive host pairs run one don't-fragment ping at the RoCE
MTU. Switch facts come from the switch itself: the ports the written profile reaches (its QUEUE
table or applied NVUE config), the PFC threshold, counter polling, the CNP queue, and on SONiC
``show pfc priority`` and the HWSKU's QoS template, rendered read-only (what ``config qos
reload`` would write back).
"""

from __future__ import annotations

import re
import shlex
import time
from typing import TYPE_CHECKING, Any

from safety.preflight import (
    CheckResult,
    HostFacts,
    PreflightFacts,
    PreflightSpec,
    QosPath,
    QosReload,
    SwitchFacts,
)
from tuner.drivers import SonicDriver, switch_driver
from tuner.drivers.sonic import show
from tuner.errors import TunerError
from tuner.pfc_threshold import switch_threshold
from tuner.ssh.shell import check, q

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster
    from tuner.experiment import Experiment
    from tuner.inventory import HostEntry, Inventory, SwitchEntry
    from tuner.ssh.transport import Connection

MARK = "--- ecntune preflight {} ---"
SECTIONS = ("ip", "ethtool", "driver", "fec", "qos", "cc", "tos", "ccalgo", "ibmtu", "stats")
_MARK = re.compile(r"^--- ecntune preflight (\w+) ---$")


# -- simulated fabric ---------------------------------------------------------------------
def sim_facts(exp: Experiment, cluster: Cluster) -> PreflightFacts:
    """Facts of a ``sim`` canary, from what rocesim actually models.

    One frame size on every port (the topology's payload plus RoCEv2 headers), links up at the
    topology's speeds, PFC on the RoCE class (and class 4 on switches when the workload sends
    lossless "other" traffic), DCQCN on the RoCE class; counters read twice (the fabric is idle
    between measurements, so they must not move). DSCP trust, ToS and firmware do not exist in
    the simulator and are reported as not readable rather than invented.
    """
    from rocesim.config import ROCEV2_HEADER_BYTES
    from rocesim.fabric import OTHER_LOSSLESS_TC, ROCE_TC

    desc = cluster.describe()
    topo = exp.fabric.topology
    frame = topo.payload_bytes + ROCEV2_HEADER_BYTES
    speed = int(topo.nic_gbps * 1000)
    before = cluster.counters()
    after = cluster.counters()
    lossless = [ROCE_TC] + ([OTHER_LOSSLESS_TC] if any(
        b.priority == "other" and b.lossless for b in exp.workload.background) else [])
    hosts = []
    for nic in desc.canary_nics:
        hosts.append(HostFacts(
            name=nic.split("/", 1)[0], nic=nic, mtu=frame, link_up=True, speed_mbps=speed,
            rp_enabled={p: p == ROCE_TC for p in range(8)},
            np_enabled={p: p == ROCE_TC for p in range(8)}, driver="rocesim",
            counters_before=dict(before.ports.get(nic, {})),
            counters_after=dict(after.ports.get(nic, {}))))
    fabric: Any = getattr(cluster, "_fabric", None) or getattr(
        getattr(cluster, "inner", None), "_fabric", None)
    switches = []
    for sw in desc.canary_switches:
        under = list(fabric.hosts_under(sw)) if fabric is not None else []
        ports = {f"port{i}": nic for i, nic in enumerate(under)}
        switches.append(SwitchFacts(
            name=sw, port_mtu={p: frame for p in ports},
            port_up={p: True for p in ports}, port_speed_mbps={p: speed for p in ports},
            lossless={p: lossless for p in ports},
            outside_ports=[p for p, nic in ports.items() if nic not in desc.canary_nics],
            version="rocesim"))
    return PreflightFacts(
        backend="sim", roce_priority=ROCE_TC, hosts=hosts, switches=switches,
        line_rate_mbps=speed,
        workload_on_roce=any(b.priority == "roce" for b in exp.workload.background))


# -- SSH ----------------------------------------------------------------------------------
def host_command(h: HostEntry) -> str:
    """One command printing every section (each tool may fail alone: ``|| true``)."""
    dev = q("netdev", h.netdev)
    net = h.sys_path(f"/sys/class/net/{check('netdev', h.netdev)}")
    dbg = h.sys_path(f"/sys/kernel/debug/mlx5/{check('pci', h.pci)}/cc_params")
    ib = h.sys_path(f"/sys/class/infiniband/{check('rdma_device', h.rdma_device)}/tc/1")
    algo = f"ROCE_CC_ALGORITHM_P{int(h.rdma_port)}"
    parts = {
        "ip": f"ip link show dev {dev}",
        "ethtool": f"ethtool {dev}",
        "driver": f"ethtool -i {dev}",
        "fec": f"ethtool --show-fec {dev}",
        "qos": f"mlnx_qos -i {dev}",
        "cc": (f"cd {q('path', net + '/ecn')} 2>/dev/null && grep -H '' roce_rp/enable/* "
               "roce_np/enable/* roce_np/cnp_dscp"),
        "tos": (f"cat {q('path', ib + '/traffic_class')}; "
                f"cat {q('path', dbg + '/np_cnp_dscp')} 2>/dev/null | sed 's/^/np_cnp_dscp:/'; "
                f"for d in {q('path', net + '/ecn/roce_rp')} {q('path', dbg)}; do "
                '[ -d "$d" ] && echo "cc_dir:$d"; done'),
        # the firmware's congestion-control algorithm (mstflint's mstconfig, or MFT mlxconfig)
        # -e: the Current column is what runs (Next Boot applies after a firmware reset)
        "ccalgo": (f"{{ mstconfig -e -d {q('pci', h.pci)} query {algo} || "
                   f"mlxconfig -e -d {q('pci', h.pci)} query {algo}; }}"),
        "ibmtu": f"ibv_devinfo -d {q('rdma_device', h.rdma_device)} -i {int(h.rdma_port)}",
        "stats": f"ethtool -S {dev}",
    }
    return "; ".join(f"echo {shlex.quote(MARK.format(k))}; {{ {cmd}; }} 2>&1 || true"
                     for k, cmd in parts.items())


def split_sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _MARK.match(line.strip())
        if m:
            current = m.group(1)
            out[current] = []
        elif current:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def _stats(text: str) -> dict[str, int]:
    from objectives.parsers import parse_ethtool_stats
    from tuner.errors import ParseError

    try:
        return dict(parse_ethtool_stats(text).counters)
    except ParseError:
        return {}


def link_speed_mbps(ethtool_text: str) -> int | None:
    """``Speed: 100000Mb/s`` of ``ethtool DEV``; None for a link without one (``Unknown!``)."""
    m = re.search(r"Speed:\s*(\d+)\s*Mb/s", ethtool_text)
    return int(m.group(1)) if m else None


def parse_host(h: HostEntry, text: str) -> dict[str, Any]:
    """HostFacts fields from one ``host_command`` answer (missing sections stay ``None``)."""
    from objectives.parsers import parse_ethtool_info, parse_mlnx_qos
    from tuner.errors import ParseError

    sec = split_sections(text)
    f: dict[str, Any] = {}
    if m := re.search(r"\bmtu (\d+)\b", sec.get("ip", "")):
        f["mtu"] = int(m.group(1))
    if m := re.search(r"\bstate (UP|DOWN|UNKNOWN)\b", sec.get("ip", "")):
        f["link_up"] = m.group(1) == "UP"
    eth = sec.get("ethtool", "")
    if (speed := link_speed_mbps(eth)) is not None:
        f["speed_mbps"] = speed
    if m := re.search(r"Link detected:\s*(yes|no)", eth):
        f["link_up"] = f.get("link_up", True) and m.group(1) == "yes"
    if m := re.search(r"Active FEC encoding:\s*(\S+)", sec.get("fec", "")):
        f["fec"] = m.group(1)
    try:
        info = parse_ethtool_info(sec.get("driver", ""))
        f["driver"] = " ".join(x for x in (info.driver, info.version) if x) or None
        f["firmware"] = info.firmware_version
    except ParseError:
        pass
    try:
        f["qos"] = parse_mlnx_qos(sec.get("qos", ""))
    except ParseError:
        pass
    rp: dict[int, bool] = {}
    np_: dict[int, bool] = {}
    for line in sec.get("cc", "").splitlines():
        name, _, value = line.strip().rpartition(":")
        if m := re.fullmatch(r"roce_(rp|np)/enable/(\d)", name):
            (rp if m.group(1) == "rp" else np_)[int(m.group(2))] = value.strip() == "1"
        elif name.endswith("cnp_dscp") and value.strip().isdigit():
            f["cnp_dscp"] = int(value)
    if rp:
        f["rp_enabled"] = rp
    if np_:
        f["np_enabled"] = np_
    tos = sec.get("tos", "")
    if m := re.search(r"tclass=(\d+)", tos):
        f["roce_tos"] = int(m.group(1))
    if "cnp_dscp" not in f and (m := re.search(r"np_cnp_dscp:(\d+)", tos)):
        f["cnp_dscp"] = int(m.group(1))
    # DCQCN parameters exposed at all (OFED ecn/roce_rp or upstream debugfs cc_params)
    f["cc_params"] = bool(re.findall(r"^cc_dir:(.+)$", tos, re.M))
    f["cc_algorithm"] = cc_algorithm(sec.get("ccalgo", ""), h.rdma_port)
    if m := re.search(r"active_mtu:\s*(\d+)", sec.get("ibmtu", "")):
        f["roce_mtu"] = int(m.group(1))
    f["counters_before"] = _stats(sec.get("stats", ""))
    return f


def cc_algorithm(text: str, port: int) -> str | None:
    """``ROCE_CC_ALGORITHM_P<port>`` as it runs now (the ``Current`` column of ``-e``, else the
    only column), e.g. ``ECN(0)`` (= DCQCN); ``None`` when the tool is missing or silent."""
    from objectives.parsers import parse_mlxconfig_query
    from tuner.errors import ParseError

    try:
        query = parse_mlxconfig_query(text)
    except ParseError:
        return None
    for dev in query.devices:
        values = dev.params.get(f"ROCE_CC_ALGORITHM_P{port}")
        if values:
            col = dev.columns.index("Current") if "Current" in dev.columns else -1
            v = values[col]
            return f"{v.text}({v.raw})" if v.raw is not None and v.text != str(v.raw) else v.text
    return None


def _ping(conn: Connection, own: HostEntry, peer: HostEntry, mtu: int) -> str | None:
    """``ok``, the failure text, or ``None`` when the host has no ``ping``.

    ``-I <netdev>``: out of the RoCE port, not whichever interface the routing table picks
    for the peer (the management port, or another rail of a GPU host)."""
    size = max(0, mtu - 28)  # ICMP payload = MTU - 20 (IPv4) - 8 (ICMP)
    addr = q("host", peer.data_address or peer.address)
    res = conn.run(f"ping -M do -c 1 -W 1 -s {size} -I {q('netdev', own.netdev)} {addr}",
                   check=False, timeout_s=10)
    if res.status == 127:
        return None
    if res.status == 0:
        return "ok"
    text = (res.stdout + res.stderr).strip().splitlines()
    return f"{text[-1] if text else 'no reply'} (size {size})"


_PFC_ROW = re.compile(r"^\s*(?P<port>[A-Za-z][\w./:-]*)\s+(?P<prios>[\d,]+|N/A)?\s*$")


def parse_pfc_priority(text: str) -> dict[str, list[int]]:
    """SONiC ``show pfc priority``: port -> lossless priorities (sonic-utilities
    doc/Command-Reference.md example: ``Interface    Lossless priorities`` then dashes, then
    ``Ethernet0    3,4``). Prompts, headers and blank lines are skipped."""
    out: dict[str, list[int]] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("Interface", "---", "admin@")) or "$ " in s:
            continue
        m = _PFC_ROW.match(s)
        if m:
            prios = m.group("prios") or ""
            out[m.group("port")] = [int(p) for p in prios.split(",") if p.isdigit()]
    return out


def switch_facts(sw: SwitchEntry, pfc_text: str | None, drv: Any = None,
                 found: dict[str, Any] | None = None, cnp_dscp: int = 48,
                 roce_dscp: int = 26, confirm_s: int = 0) -> SwitchFacts:
    """The switch's own view: the ports the written profile reaches (its QUEUE table or applied
    NVUE config), the PFC threshold (dynamic threshold, pool, fan-in), counter polling, the CNP
    queue's scheduler; on SONiC the lossless priorities of the canary ports (``show pfc
    priority``), the path of the RoCE and CNP DSCPs through its QoS maps, and whether it counts
    ECN marks at all."""
    lossless: dict[str, list[int]] = {}
    if pfc_text:
        table = parse_pfc_priority(pfc_text)
        lossless = {p: table[p] for p in sw.canary_ports if p in table}
    extra: dict[str, Any] = {}
    if drv is not None and found is not None:
        from tuner.drivers.sonic import POLL_GROUPS

        if sw.platform == "sonic":
            reach = [f"{p}|{qu}" for p, qu in drv.reach(found["queue_table"])]
            poll = found.get("counterpoll") or {}
            db = found.get("config_db") or {}
            ecn, why = found.get("ecn_counters") or ("on", "")
            # the WRED/ECN group is off also when its FLEX_COUNTER row is missing; absent (the
            # release or platform has no such counters) is reported apart, never as off
            off = {g for g in POLL_GROUPS.values() if g in poll and not poll[g][1]}
            off = (off | {POLL_GROUPS["wred"]}) if ecn == "off" else off - {POLL_GROUPS["wred"]}
            cnp = drv.qos_paths(db, cnp_dscp)
            extra = {"reach": [r.split("|")[0] for r in reach],
                     "counter_poll_s": {k: poll[g][0] for k, g in POLL_GROUPS.items()
                                        if g in poll and poll[g][1]},
                     "counters_off": sorted(off),
                     "ecn_counters_absent": why if ecn == "absent" else None,
                     "cnp_queue": drv.cnp_schedulers(db, cnp_dscp),
                     "cnp_queue_index": {p: v["queue"] for p, v in cnp.items()
                                         if v["queue"] is not None},
                     "lossless_queue": int(sw.lossless_queue),
                     "roce_path": {p: QosPath(**v) for p, v in
                                   drv.qos_paths(db, roce_dscp).items()}}
        else:
            extra = _nvue_extra(sw, found, roce_dscp, confirm_s)
            extra.update(reach=drv.reach(found["tree"]), cnp_queue=found.get("cnp") or {})
    extra["pfc_threshold"] = switch_threshold(sw, found)
    # With the switch's own view the blast radius is computed (``reach``): the inventory's
    # other_ports are only watched (counters), the canary profile never reaches them.
    outside = [] if extra.get("reach") else list(sw.other_ports)
    return SwitchFacts(name=sw.name, outside_ports=outside, lossless=lossless,
                       canary_ports=list(sw.canary_ports), written=sw.canary_profile, **extra)


def _nvue_extra(sw: SwitchEntry, found: dict[str, Any], roce_dscp: int, confirm_s: int
                ) -> dict[str, Any]:
    """NVUE: where the RoCE data DSCP lands, pending confirms, the trials' confirm window."""
    from safety.preflight import RocePath
    from tuner.drivers.nvue import GLOBAL, clone_rows, roce_path

    clone_rows(sw.name, found["tree"], GLOBAL, sw.lossless_queue)  # ConfigError: not cloneable
    roce = found.get("roce")
    return {"lossless_queue": sw.lossless_queue, "confirm_pending": found.get("pending"),
            "confirm_window_s": confirm_s or None,
            "roce_maps": RocePath(**roce_path(roce, roce_dscp)) if roce else None}


def _switch_pfc(conn: Connection, sw: SwitchEntry) -> str | None:
    if sw.platform != "sonic":
        return None  # NVUE: `nv show qos pfc` is per profile, not per port; not read yet
    res = conn.run(show("show pfc priority"), check=False, timeout_s=30)
    return res.stdout if res.status == 0 else None


def qos_reload(conn: Connection, sw: SwitchEntry, db: dict[str, Any], roce_dscp: int
               ) -> QosReload:
    """SONiC: render the HWSKU's ``qos.json.j2`` read-only (stdout, nothing written) and
    compare it with the running CONFIG_DB ``db``: what a QoS reload would undo."""
    from tuner.drivers import _sonic_reload as reload
    from tuner.ssh.shell import UnsafeValue

    path = reload.template_path(db)
    if path is None:
        return QosReload(unchecked="CONFIG_DB DEVICE_METADATA|localhost names no platform and "
                                   "hwsku, so the HWSKU's qos.json.j2 is not known")
    try:
        cmd = reload.render_command(path)
    except UnsafeValue as exc:
        return QosReload(template=path, unchecked=f"template path not rendered: {exc}")
    res = conn.run(cmd, check=False, timeout_s=60)
    if res.status != 0:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.status}"])[-1]
        return QosReload(template=path, unchecked=f"`{cmd}` failed: {why}")
    try:
        rendered = reload.parse_render(res.stdout)
    except ValueError as exc:
        return QosReload(template=path, unchecked=f"`{cmd}` printed no JSON object: {exc}")
    return QosReload(template=path, losses=reload.reload_losses(
        db, rendered, profile=sw.canary_profile, original=sw.wred_profile,
        ports=list(sw.canary_ports), queue=int(sw.lossless_queue), dscp=roce_dscp))


def enable_counters(cluster: Any) -> list[str]:
    """``counterpoll wredqueue enable`` on every SONiC canary switch whose WRED/ECN queue
    counters are off (the operator asked: ``--enable-counters``); returns those switches."""
    done = []
    for sw in cluster.inventory.switches:
        o = cluster.switch_facts()[sw.name]
        ecn = ((o.value or {}).get("ecn_counters") or ("on",) if o.error is None else ("on",))
        if sw.platform == "sonic" and ecn[0] == "off":  # absent: no such group to enable
            drv = SonicDriver(cluster.pool.conns[sw.name], sw)
            drv.runner.run(drv.enable_counters_command(), timeout_s=30)
            done.append(sw.name)
    if done:
        cluster.switch_facts(refresh=True)
    return done


def ssh_facts(cluster: Any, spec: PreflightSpec, confirm_s: int = 0) -> PreflightFacts:
    """Facts of an SSH canary (``cluster`` is a ``tuner.cluster.ssh.SshCluster``;
    ``confirm_s``: the NVUE commit-confirm window of each trial, 0 for none)."""
    # rails checked against sysfs (exit 2 naming the rail), PCI filled; an unreachable host is
    # reported below, naming its address
    cluster.resolve_rails(skip_unreachable=True)
    inv: Inventory = cluster.inventory
    pool = cluster.pool
    hosts = {h.name: h for h in inv.hosts}
    t0 = time.monotonic()
    first = pool.fan_out(lambda c: c.run(host_command(hosts[c.name]), check=False).stdout,
                         list(hosts))
    parsed: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for name, o in first.items():
        if o.error is not None:
            errors[name] = str(o.error)
        else:
            parsed[name] = parse_host(hosts[name], o.value or "")
    wait = spec.error_sample_s - (time.monotonic() - t0)
    if wait > 0 and parsed:
        time.sleep(wait)
    sample_s = time.monotonic() - t0
    second = pool.fan_out(
        lambda c: c.run(f"ethtool -S {q('netdev', hosts[c.name].netdev)}", check=False).stdout,
        list(parsed))
    for name, o in second.items():
        parsed[name]["counters_after"] = _stats(o.value or "") if o.error is None else {}
        parsed[name]["sample_s"] = sample_s
    if spec.df_ping:
        names = list(parsed)
        mtu = spec.mtu or max((p.get("mtu") or 0 for p in parsed.values()), default=0)
        pairs = {a: b for a, b in zip(names, names[1:] + names[:1], strict=True) if a != b}
        if mtu and pairs:
            pings = pool.fan_out(lambda c: _ping(c, hosts[c.name], hosts[pairs[c.name]], mtu),
                                 list(pairs))
            for a, o in pings.items():
                res = o.value if o.error is None else str(o.error)
                if res is not None:
                    parsed[a]["ping"] = {pairs[a]: res}
    out_hosts = [HostFacts(name=h.name, nic=h.nic, error=errors.get(h.name),
                           **(parsed.get(h.name) or {})) for h in inv.hosts]
    sws = {s.name: s for s in inv.switches}
    pfc = pool.fan_out(lambda c: _switch_pfc(c, sws[c.name]), list(sws)) if sws else {}
    found = cluster.switch_facts(refresh=True) if sws else {}
    drivers = {n: switch_driver(pool.conns[n], sw) for n, sw in sws.items()}
    sonic = [n for n, sw in sws.items() if sw.platform == "sonic" and found[n].error is None
             and (found[n].value or {}).get("config_db") is not None]
    reloads = pool.fan_out(lambda c: qos_reload(c, sws[c.name], found[c.name].value["config_db"],
                                                spec.roce_dscp), sonic) if sonic else {}
    out_switches = []
    for s in inv.switches:
        err = pfc[s.name].error or found[s.name].error
        if err is not None:
            out_switches.append(SwitchFacts(name=s.name, error=str(err),
                                            outside_ports=list(s.other_ports)))
            continue
        try:
            sf = switch_facts(s, pfc[s.name].value, drivers[s.name], found[s.name].value,
                              spec.cnp_dscp, spec.roce_dscp, confirm_s)
            o = reloads.get(s.name)
            if o is not None:
                sf = sf.model_copy(update={"qos_reload": o.value if o.error is None else
                                           QosReload(unchecked=str(o.error))})
            out_switches.append(sf)
        except TunerError as exc:  # an unreadable switch configuration: name it, do not guess
            out_switches.append(SwitchFacts(name=s.name, error=str(exc),
                                            outside_ports=list(s.other_ports)))
    prios = {h.roce_priority for h in inv.hosts}
    return PreflightFacts(
        backend="ssh", roce_priority=min(prios), hosts=out_hosts,
        switches=out_switches,
        line_rate_mbps=int(max((h.nic_gbps for h in inv.hosts), default=0) * 1000) or None)


def _cnp_watermarks(cluster: Any, switches: list[SwitchFacts]) -> dict[str, int]:
    """Peak occupancy of each CNP queue (``show queue watermark unicast``, bytes, since the
    last clear), ``{"leaf0/Ethernet0": 2704}``; a switch that cannot show it gives nothing."""
    from objectives.parsers import parse_watermark
    from tuner.drivers.sonic import CNP_WATERMARK
    from tuner.errors import ParseError

    out: dict[str, int] = {}
    for s in switches:
        res = cluster.pool.conns[s.name].run(CNP_WATERMARK, check=False, timeout_s=30)
        try:
            rows = parse_watermark(res.stdout).merged() if res.status == 0 else {}
        except ParseError:
            continue
        for port, queue in s.cnp_queue_index.items():
            value = rows.get(port, {}).get(f"UC{queue}")
            if value is not None:
                out[f"{s.name}/{port}"] = value
    return out


def cnp_starvation(exp: Experiment, cluster: Cluster, ms: list[Any]) -> list[CheckResult]:
    """The CNP queue of every SONiC canary port under the baseline load (``ms``: the baseline
    measurements): its drops (a fail) and watermark (evidence). Other backends: nothing."""
    from safety.preflight import check_cnp_starvation

    if cluster.describe().backend != "ssh":
        return []
    inner: Any = getattr(cluster, "inner", cluster)
    spec = getattr(exp, "preflight", None) or PreflightSpec()
    found = inner.switch_facts()
    switches = [switch_facts(s, None, switch_driver(inner.pool.conns[s.name], s),
                             found[s.name].value, spec.cnp_dscp, spec.roce_dscp)
                for s in inner.inventory.switches
                if s.platform == "sonic" and found[s.name].error is None]
    delta: dict[str, dict[str, int]] = {}
    for m in ms:
        for port, row in m.counters.ports.items():
            into = delta.setdefault(port, {})
            for k, v in row.items():
                into[k] = into.get(k, 0) + int(v)
    return check_cnp_starvation(switches, delta, _cnp_watermarks(inner, switches))


def collect(exp: Experiment, cluster: Cluster, spec: PreflightSpec) -> PreflightFacts:
    """Facts for ``cluster``'s backend."""
    backend = cluster.describe().backend
    if backend == "sim":
        return sim_facts(exp, cluster)
    if backend == "ssh":
        inner = getattr(cluster, "inner", cluster)
        return ssh_facts(inner, spec, int(getattr(cluster, "nvue_confirm_s", 0) or 0))
    raise ValueError(f"no pre-flight facts collector for backend {backend!r}")
