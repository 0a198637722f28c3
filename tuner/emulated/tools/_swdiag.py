"""What an emulated switch shows ``ecntune diagnose`` of its ports and OS (read-only views).

SONiC (sonic-utilities): ``show interfaces status`` (intfutil, tabulate ``simple``, right-aligned;
tests/intfutil_test.py), ``show interfaces counters`` (portstat; tests/portstat_test.py and
shared/reference/sonic/real-pfcwd-config-old-format-and-interface-counters-issue9193.txt),
``show version`` (show/main.py ``version``), ``show interfaces flap`` (202505 and later;
show/interfaces/__init__.py ``flap``, tests/flap_test.py). Cumulus NVUE (NVUE reference, Show
Commands): ``nv show interface <swp> link`` and ``nv show system``. Samples and sources:
docs/reference-notes/diagnose-formats.md.

Port speed is the rocesim link behind it (hosts: ``nic_gbps``, uplinks: ``uplink_gbps``).
Faults (``EmulatedCluster.inject`` on a switch): ``port_down`` (ports oper down),
``port_speed_gbps`` (ports trained below their speed), ``port_rx_errors`` (RX errors per second
on ports, a rate fault), ``port_flaps`` (flaps per second on ports, a rate fault: SONiC's flap
count, NVUE's carrier transitions), ``os_version`` (another OS build than the emulated release).
"""

from __future__ import annotations

from tuner.emulated import fabric
from tuner.emulated.tools._base import Target
from tuner.emulated.tools._fmt import comma, simple_table

NVUE_BUILD = "Cumulus Linux 5.12.0"  # the release whose command forms nv.py plays
SONIC_MTU = 9100  # SONiC's default port MTU


def _ports(t: Target) -> list[str]:
    return [*t.state["host_ports"], *t.state["uplink_ports"]]


def port_gbps(t: Target, port: str) -> float:
    """What the port trained at: the rocesim link's speed, unless a fault lowered it."""
    own = (t.faults.get("port_speed_gbps") or {}).get(port)
    if own is not None:
        return float(own)
    topo = fabric.load_topology(t.root)
    key = "nic_gbps" if port in t.state["host_ports"] else "uplink_gbps"
    return float(topo.get(key, 100.0))


def is_up(t: Target, port: str) -> bool:
    return port not in (t.faults.get("port_down") or [])


def _speed(gbps: float) -> str:
    return f"{gbps:g}G" if gbps >= 1 else f"{gbps * 1000:g}M"


def sonic_status(t: Target) -> str:
    rows = []
    for i, p in enumerate(_ports(t)):
        lanes = ",".join(str(4 * i + k) for k in range(4))
        rows.append([p, lanes, _speed(port_gbps(t, p)), str(SONIC_MTU), "rs", f"etp{i + 1}",
                     "routed", "up" if is_up(t, p) else "down", "up", "QSFP28 or later", "off"])
    head = ["Interface", "Lanes", "Speed", "MTU", "FEC", "Alias", "Vlan", "Oper", "Admin",
            "Type", "Asym PFC"]
    return simple_table(head, rows, stralign="right") + "\n"


def sonic_counters(t: Target) -> str:
    c = t.counters()
    rows = []
    for p in _ports(t):
        pc = c.get(p, {})
        tx = sum(pc.get(f"q{q}_pkts", 0) for q in range(8))
        rows.append([p, "U" if is_up(t, p) else "D", comma(pc.get("rx_ok", 0)), "0.00 B/s",
                     "0.00%", comma(pc.get("rx_err", 0)), comma(pc.get("rx_drp", 0)), "0",
                     comma(tx), "0.00 B/s", "0.00%", "0",
                     comma(sum(pc.get(f"q{q}_drop_pkts", 0) for q in range(8))), "0"])
    head = ["IFACE", "STATE", "RX_OK", "RX_BPS", "RX_UTIL", "RX_ERR", "RX_DRP", "RX_OVR",
            "TX_OK", "TX_BPS", "TX_UTIL", "TX_ERR", "TX_DRP", "TX_OVR"]
    return simple_table(head, rows, stralign="right") + "\n"


def sonic_flap(t: Target, port: str | None = None) -> str:
    """APPL_DB ``PORT_TABLE`` as the flap view shows it: ``flap_count`` and the last down/up
    times only once a flap was counted (``Never`` before), the statuses capitalised."""
    import time

    from tuner.emulated import state

    c = t.counters()
    since = float((state.read_json(t.dir / state.FAULT_CLOCK) or {}).get("since", 0.0))
    rates = t.faults.get("port_flaps") or {}
    rows = []
    for p in [port] if port else _ports(t):
        n = int(c.get(p, {}).get("flaps", 0))
        stamp = "Never"
        if n and rates.get(p):  # the n-th flap of a rate-r fault: since + n / r, down and up
            stamp = time.strftime("%a %b %d %H:%M:%S %Y",
                                  time.gmtime(since + n / float(rates[p])))
        updown = "Up" if is_up(t, p) else "Down"
        rows.append([p, str(n) if n else "Never", "Up", updown, stamp, stamp])
    head = ["Interface", "Flap Count", "Admin", "Oper", "Link Down TimeStamp(UTC)",
            "Link Up TimeStamp(UTC)"]
    return simple_table(head, rows) + "\n"


def sonic_version(t: Target) -> str:
    build = t.faults.get("os_version") or f"{t.state.get('sonic_release', '202505')}.1"
    return (f"\nSONiC Software Version: SONiC.{build}\n"
            "Distribution: Debian 12.9\nKernel: 6.1.0-22-2-amd64\nBuild commit: 7995b757b\n"
            "Build date: Sun Feb  9 04:30:37 UTC 2025\nBuilt by: sonicbld@emulated\n\n"
            "Platform: x86_64-mlnx_msn2700-r0\nHwSKU: ACS-MSN2700\nASIC: mellanox\n"
            "ASIC Count: 1\nSerial Number: MT0000X00000\nModel Number: MSN2700-CS2F\n"
            "Hardware Revision: A1\nUptime: 05:00:00 up 62 days,  1:02,  1 user,  load average:"
            " 1.49, 1.13, 1.10\nDate: Sun 06 Dec 2026 05:00:00\n\nDocker images:\n"
            "REPOSITORY             TAG       IMAGE ID       SIZE\n"
            "docker-orchagent       latest    4f3b5a1c2d3e   330MB\n"
            "docker-syncd-mlnx      latest    9a8b7c6d5e4f   720MB\n")


def nvue_link(t: Target, port: str) -> str:
    """``nv show interface <swp> link`` (CL 5.x; the operational/applied table of the NVUE
    reference sample, stats indented under ``stats``)."""
    pc = t.counters().get(port, {})
    up = "up" if is_up(t, port) else "down"
    speed = _speed(port_gbps(t, port))
    tx = sum(pc.get(f"q{q}_pkts", 0) for q in range(8))
    rows = [("auto-negotiate", "off", "on"), ("duplex", "full", "full"),
            ("speed", speed if up == "up" else "", "auto"), ("fec", "", "auto"),
            ("mtu", "9216", "9216"), ("[breakout]", "", ""), ("state", up, "up"),
            ("stats", "", ""),
            ("  carrier-transitions", str(2 + int(pc.get("carrier_transitions", 0))), ""),
            ("  in-bytes", "0 Bytes", ""), ("  in-drops", "0", ""),
            ("  in-errors", str(pc.get("rx_err", 0)), ""), ("  in-pkts", "0", ""),
            ("  out-bytes", "0 Bytes", ""),
            ("  out-drops", str(sum(pc.get(f"q{q}_drop_pkts", 0) for q in range(8))), ""),
            ("  out-errors", "0", ""), ("  out-pkts", str(tx), ""), ("mac", _mac(t, port), "")]
    return _kv(rows)


def nvue_system(t: Target) -> str:
    build = t.faults.get("os_version") or NVUE_BUILD
    return _kv([("hostname", t.name, t.name), ("build", build, ""),
                ("uptime", "62 days, 1:02:11", ""), ("timezone", "Etc/UTC", "")])


def _kv(rows: list[tuple[str, str, str]]) -> str:
    w = [max(len(r[i]) for r in rows) for i in range(2)]
    w = [max(w[0], 8), max(w[1], 11)]
    head = f"{'':<{w[0]}}  {'operational':<{w[1]}}  applied"
    out = [head.rstrip(), f"{'-' * w[0]}  {'-' * w[1]}  -------"]
    out += [f"{k:<{w[0]}}  {o:<{w[1]}}  {a:<7}" for k, o, a in rows]
    return "\n".join(out) + "\n"


def _mac(t: Target, port: str) -> str:
    n = (sum(map(ord, t.name)) * 131 + _ports(t).index(port)) % 65536
    return f"48:b0:2d:6c:{n >> 8:02x}:{n & 0xff:02x}"


def unknown_port(t: Target, port: str) -> bool:
    return port not in _ports(t)
