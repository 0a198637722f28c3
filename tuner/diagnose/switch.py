"""The switch side of ``diagnose``: what it reads on each canary switch and the checks (pure).

Read-only commands, two reads ``--sample-s`` apart, in the same window as the hosts' counters:

* SONiC: ``show version``, ``show interfaces status``, ``show interfaces counters`` and ``show
  interfaces flap`` (202505 and later) first; the counters and the flaps again second.
* Cumulus NVUE: ``nv show system`` and ``nv show interface <port> link`` per canary port first;
  the links again second.

Checks: ``switch_port`` (a canary port oper down, or trained below the canary hosts' NIC speed:
dominant), ``switch_errors`` (RX/TX errors rising on a canary port between the reads: dominant),
``switch_flaps`` (NVUE carrier transitions, SONiC's flap count rising; a SONiC release without
``show interfaces flap`` is "not checked"), and ``switch_os`` (the OS build per switch,
a versions table; ``switch_os_drift`` when a switch runs another build than the most common one
among the canary switches of its platform).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.diagnose import switch_parse as sp
from tuner.diagnose.finding import Finding, NotChecked
from tuner.drivers.sonic import show
from tuner.ssh.shell import q

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry

Rows = list[Finding | NotChecked]


@dataclass
class SwitchRead:
    """What one switch answered; ``error``: it could not be read at all."""

    name: str
    entry: SwitchEntry
    error: str | None = None
    first: dict[str, str] = field(default_factory=dict)  # raw text per section
    second: dict[str, str] = field(default_factory=dict)
    sample_s: float = 0.0


def _link_key(i: int) -> str:
    return f"link{i}"  # section names are \w+; port i of canary_ports


def first_parts(sw: SwitchEntry) -> dict[str, str]:
    if sw.platform == "sonic":
        return {"version": show("show version"), "status": show("show interfaces status"),
                **second_parts(sw)}
    return {"version": "nv show system", **second_parts(sw)}


def second_parts(sw: SwitchEntry) -> dict[str, str]:
    if sw.platform == "sonic":
        return {"counters": show("show interfaces counters"),
                "flap": show("show interfaces flap")}
    return {_link_key(i): f"nv show interface {q('switch_port', p)} link"
            for i, p in enumerate(sw.canary_ports)}


def ports(r: SwitchRead, second: bool = False) -> dict[str, sp.Port] | None:
    """The canary ports as read (first or second read); ``None`` when unreadable."""
    text = r.second if second else r.first
    if r.entry.platform == "sonic":
        counters = sp.sonic_counters(text.get("counters", ""))
        status = {} if second else sp.sonic_status(text.get("status", ""))
        flaps = sp.sonic_flaps(text.get("flap", "")) or {}  # none before 202505
        if counters is None or status is None:
            return None
        out = {}
        for p in r.entry.canary_ports:
            s, c = status.get(p), counters.get(p)
            if s is not None or c is not None:
                out[p] = sp.Port(oper=s.oper if s else None,
                                 speed_mbps=s.speed_mbps if s else None,
                                 rx_err=c.rx_err if c else None, tx_err=c.tx_err if c else None,
                                 flaps=flaps.get(p))
        return out
    links = {p: sp.nvue_link(text.get(_link_key(i), ""))
             for i, p in enumerate(r.entry.canary_ports)}
    return {p: link for p, link in links.items() if link is not None}


def version(r: SwitchRead) -> str | None:
    text = r.first.get("version", "")
    return sp.sonic_version(text) if r.entry.platform == "sonic" else sp.nvue_build(text)


def _why(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else "no output"
    return first[:120]


def port_rows(r: SwitchRead, want_mbps: int) -> Rows:
    """``switch_port``, ``switch_errors``, ``switch_flaps`` on one switch's canary ports."""
    before, after = ports(r), ports(r, second=True)
    if before is None:
        raw = r.first.get("status" if r.entry.platform == "sonic" else _link_key(0), "")
        return [NotChecked(layer="physical", check="switch_port", where=r.name,
                           reason=f"interface status not readable: {_why(raw)}")]
    out: Rows = []
    for p in r.entry.canary_ports:
        where = f"{r.name}/{p}"
        b = before.get(p) or sp.Port()
        if b.oper is None:
            out.append(NotChecked(layer="physical", check="switch_port", where=where,
                                  reason="the port is not in the switch's interface status"))
        elif b.oper != "up":
            out.append(Finding(
                layer="physical", check="switch_port", where=where,
                evidence=f"{_cmd(r, p)}: oper {b.oper}", dominant=True,
                cause="the canary port is down: its host is cut off (cable, optic, the port "
                      "shut or error-disabled)",
                action="check the cable and optic, the port's admin state and the switch log"))
        elif b.speed_mbps is not None and b.speed_mbps < want_mbps:
            out.append(Finding(
                layer="physical", check="switch_port", where=where,
                evidence=f"{_cmd(r, p)}: speed {b.speed_mbps // 1000}G; the canary hosts' "
                         f"nic_gbps {want_mbps // 1000}", dominant=True,
                cause="the port trained below the NIC's speed (cable/optic, a forced speed or "
                      "a breakout on the switch)",
                action="compare both ends; replace the cable/optic or fix the port's speed"))
        out += _rising(r, p, b, (after or {}).get(p))
    return out


def _cmd(r: SwitchRead, port: str) -> str:
    return ("show interfaces status" if r.entry.platform == "sonic"
            else f"nv show interface {port} link")


def _rising(r: SwitchRead, p: str, b: sp.Port, a: sp.Port | None) -> Rows:
    where = f"{r.name}/{p}"
    if a is None:
        return [NotChecked(layer="physical", check="switch_errors", where=where,
                           reason="the port's counters were not read twice")]
    sonic = r.entry.platform == "sonic"
    names = ("RX_ERR", "TX_ERR") if sonic else ("in-errors", "out-errors")
    up = [f"{n} {x} -> {y}" for n, x, y in ((names[0], b.rx_err, a.rx_err),
                                             (names[1], b.tx_err, a.tx_err))
          if x is not None and y is not None and y > x]
    cmd = "show interfaces counters" if sonic else f"nv show interface {p} link"
    out: Rows = []
    if up:
        out.append(Finding(
            layer="physical", check="switch_errors", where=where, dominant=True,
            evidence=f"{cmd} over {r.sample_s:.1f} s: {', '.join(up)}",
            cause="frames arrive corrupted at the switch port (dirty or failing optic/cable, "
                  "FEC off on one end): drops that become RDMA retransmits",
            action="clean or replace the optic/cable on this port and its host, compare FEC on "
                   "both ends, then re-run diagnose"))
    if b.flaps is None or a.flaps is None:
        if sonic:
            raw = (r.second if b.flaps is not None else r.first).get("flap", "")
            out.append(NotChecked(
                layer="physical", check="switch_flaps", where=where,
                reason=("`show interfaces flap` (SONiC 202505 and later) not readable: "
                        f"{_why(raw)}" if sp.sonic_flaps(raw) is None else
                        "the port is not in `show interfaces flap`")))
    elif a.flaps > b.flaps:
        flap_cmd, name = (("show interfaces flap", "Flap Count") if sonic
                          else (cmd, "carrier-transitions"))
        out.append(Finding(
            layer="physical", check="switch_flaps", where=where,
            evidence=f"{flap_cmd}: {name} {b.flaps} -> {a.flaps} in {r.sample_s:.1f} s",
            cause="the link goes down and up (loose or failing cable/optic)",
            action="reseat or replace the cable/optic; read the switch log for the port"))
    return out


def os_rows(reads: list[SwitchRead]) -> tuple[Rows, dict[str, dict[str, str]]]:
    """The OS build per switch (a versions table) and drift within each platform."""
    table: dict[str, dict[str, str]] = {}
    out: Rows = []
    for r in reads:
        v = version(r) if r.error is None else None
        if v is None:
            why = r.error or _why(r.first.get("version", ""))
            out.append(NotChecked(layer="collectives", check="switch_os", where=r.name,
                                  reason=f"OS version not readable: {why}"))
            continue
        table[r.name] = {"platform": r.entry.platform, "os": v}
    for platform in sorted({row["platform"] for row in table.values()}):
        mine = {n: row["os"] for n, row in table.items() if row["platform"] == platform}
        builds = Counter(mine.values())
        if len(builds) < 2:
            continue
        common, count = builds.most_common(1)[0]
        majority = 2 * count > len(mine)  # else no build runs on most: every switch is named
        for name, v in mine.items():
            if majority and v == common:
                continue
            ref = (f"{count} of {len(mine)} {platform} canary switches run {common}" if majority
                   else f"the {len(mine)} {platform} canary switches run {len(builds)} builds: "
                        + ", ".join(sorted(builds)))
            out.append(Finding(
                layer="collectives", check="switch_os_drift", where=name,
                evidence=f"{platform} OS {v}; {ref}",
                cause="the switches run different OS builds: buffer, ECN and PFC defaults "
                      "and counters differ between builds",
                action=f"upgrade {name} to the fleet's build (or all to one) before tuning"))
    return out, table
