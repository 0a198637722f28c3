"""Stand-in SONiC ``show``: ``ecn``, ``pfc counters``, ``pfc priority``, ``queue counters [-j]``,
``queue wredcounters`` (202505 and later), ``queue watermark unicast``, ``pfcwd stats`` (formats:
shared/reference/sonic/*.txt, produced by pfcstat, queuestat, wredstat and pfcwd in
sonic-utilities @691b1bbc4; ``pfc priority``: doc/Command-Reference.md); ``interfaces status``,
``interfaces counters``, ``interfaces flap [<port>]`` (202505 and later) and ``version`` for
``ecntune diagnose`` (``_swdiag``).

The interface naming mode is honoured as sonic-utilities does: ``SONIC_CLI_IFACE_MODE`` as the
command sees it, or, unset, what the login's ``~/.bashrc`` exports (``config
interface_naming_mode alias`` writes it; the state's ``iface_naming_mode``). In alias mode port
names in the output become the vendor aliases (``etp1``, ... in port order), by the rule of
``utilities_common/cli.py`` ``run_command_in_alias_mode``'s default branch."""

from __future__ import annotations

import json
import os
import re
import sys

from tuner.emulated.switches import FLAP_VIEW_SINCE, WRED_ECN_SINCE, has_wred_ecn
from tuner.emulated.tools import _swdiag
from tuner.emulated.tools._base import Target, target
from tuner.emulated.tools._fmt import click_no_such_command, comma, simple_table

UC = 8  # Mellanox SONiC: UC0-7 and MC8-15 per port


def _ports(t: Target) -> list[str]:
    return [*t.state["host_ports"], *t.state["uplink_ports"]]


def pfc_counters(t: Target) -> str:
    c = t.counters()
    out = []
    for side, key in (("Rx", "pfc_rx"), ("Tx", "pfc_tx")):
        rows = [[p, *(comma(c.get(p, {}).get(f"{key}_{q}", 0)) for q in range(8))]
                for p in _ports(t)]
        out.append(simple_table([f"Port {side}", *(f"PFC{q}" for q in range(8))], rows,
                                stralign="right"))
    return "\n\n".join(out) + "\n"


def _queue_rows(t: Target, fields: tuple[str, ...], port: str | None
                ) -> dict[str, list[list[str]]]:
    c = t.counters()
    out: dict[str, list[list[str]]] = {}
    for p in [port] if port else _ports(t):
        pc = c.get(p, {})
        rows = []
        for q in range(2 * UC):
            name = f"UC{q}" if q < UC else f"MC{q}"
            rows.append([p, name, *(str(pc.get(f"q{q}_{f}", 0) if q < UC else 0)
                                    for f in fields)])
        out[p] = rows
    return out


def queue_counters(t: Target, as_json: bool, port: str | None = None) -> str:
    fields = ("pkts", "bytes", "drop_pkts", "drop_bytes")
    per_port = _queue_rows(t, fields, port)
    if as_json:
        doc = {p: {r[1]: {"dropbytes": r[5], "droppacket": r[4], "totalbytes": r[3],
                          "totalpacket": r[2]} for r in rows} for p, rows in per_port.items()}
        return json.dumps(doc, indent=4, sort_keys=True) + "\n"
    head = ["Port", "TxQ", "Counter/pkts", "Counter/bytes", "Drop/pkts", "Drop/bytes"]
    return "".join(f"For namespace :\n{simple_table(head, rows, stralign='right')}\n\n"
                   for rows in per_port.values())


def wred_counters(t: Target, port: str | None = None) -> str:
    fields = ("wred_drop_pkts", "wred_drop_bytes", "ecn_marked_pkts", "ecn_marked_bytes")
    head = ["Port", "TxQ", "WredDrp/pkts", "WredDrp/bytes", "EcnMarked/pkts",
            "EcnMarked/bytes"]
    return "".join(f"{simple_table(head, rows, stralign='right')}\n\n"
                   for rows in _queue_rows(t, fields, port).values())


def queue_watermark(t: Target) -> str:
    """``show queue watermark unicast`` (watermarkstat -t q_shared_uni): peak bytes per unicast
    queue since the last clear, from ``q<N>_watermark_bytes``."""
    c = t.counters()
    rows = [[p, *(str(c.get(p, {}).get(f"q{q}_watermark_bytes", 0)) for q in range(UC))]
            for p in _ports(t)]
    return ("Egress shared pool occupancy per unicast queue:\n"
            + simple_table(["Port", *(f"UC{q}" for q in range(UC))], rows) + "\n")


def pfcwd_stats(t: Target) -> str:
    c = t.counters()
    q = t.state["lossless_queue"]
    rows = []
    for p in _ports(t):
        pc = c.get(p, {})
        det, res = pc.get("pfcwd_storm_detected", 0), pc.get("pfcwd_storm_restored", 0)
        status = "stormed" if det > res else "operational"
        rows.append([f"{p}:{q}", status, f"{det}/{res}",
                     f"{pc.get(f'q{q}_pkts', 0)}/{pc.get(f'q{q}_pfcwd_tx_drop', 0)}",
                     f"{pc.get(f'q{q}_rx_pkts', 0)}/{pc.get(f'q{q}_pfcwd_rx_drop', 0)}",
                     f"0/{pc.get(f'q{q}_pfcwd_tx_drop', 0) if status == 'stormed' else 0}",
                     f"0/{pc.get(f'q{q}_pfcwd_rx_drop', 0) if status == 'stormed' else 0}"])
    head = ["QUEUE", "STATUS", "STORM DETECTED/RESTORED", "TX OK/DROP", "RX OK/DROP",
            "TX LAST OK/DROP", "RX LAST OK/DROP"]
    return simple_table(head, rows, stralign="right") + "\n"


def pfc_priority(t: Target) -> str:
    """``show pfc priority``: the lossless priorities of every port (PORT_QOS_MAP pfc_enable)."""
    qos = t.state.get("config_db", {}).get("PORT_QOS_MAP", {})
    rows = [[p, qos.get(p, {}).get("pfc_enable") or "N/A"] for p in _ports(t)]
    return "\n" + simple_table(["Interface", "Lossless priorities"], rows) + "\n\n"


def naming_mode(t: Target) -> str:
    return os.environ.get("SONIC_CLI_IFACE_MODE") or t.state.get("iface_naming_mode", "default")


def in_alias_mode(t: Target, text: str) -> str:
    """Each port name at the start of a line or after whitespace, and followed by the end of
    the line, whitespace or a comma and whitespace, becomes its alias."""
    for i, name in enumerate(_ports(t)):
        text = re.sub(rf"(?<!\S){re.escape(name)}(?=$|,?\s)", f"etp{i + 1}", text,
                      flags=re.M)
    return text


def main(argv: list[str]) -> int:
    t = target("show")
    out: list[str] = []
    status = _show(t, argv, out)
    text = "".join(out)
    sys.stdout.write(in_alias_mode(t, text) if naming_mode(t) == "alias" else text)
    return status


def _show(t: Target, argv: list[str], out: list[str]) -> int:
    if t.state.get("platform") != "sonic":
        print("bash: show: command not found", file=sys.stderr)
        return 127
    words = [a for a in argv if not a.startswith("-")]
    flags = [a for a in argv if a.startswith("-")]
    if words[:1] == ["ecn"]:
        from tuner.emulated.tools import ecnconfig

        return ecnconfig.main(["-l", *flags])
    if words[:2] == ["queue", "wredcounters"] and not has_wred_ecn(
            t.state.get("sonic_release", WRED_ECN_SINCE)):  # before 202505: no such command
        sys.stderr.write(click_no_such_command("show queue", "wredcounters"))
        return 2
    if words[:2] in (["interfaces", "flap"], ["interface", "flap"]) and \
            t.state.get("sonic_release", FLAP_VIEW_SINCE) < FLAP_VIEW_SINCE:
        sys.stderr.write(click_no_such_command("show interfaces", "flap"))
        return 2
    t.tick_counter_faults()
    port = words[2] if len(words) == 3 and words[:2] in (["queue", "counters"],
                                                         ["queue", "wredcounters"]) else None
    if port is not None and port not in _ports(t):
        print(f"Port doesn't exist! {port}")
        return 1
    flap_port = words[2] if len(words) == 3 and words[1] == "flap" else None
    if flap_port is not None and flap_port not in _ports(t):  # click's ctx.fail
        sys.stderr.write("Usage: show interfaces flap [OPTIONS] [INTERFACENAME]\n"
                         "Try \"show interfaces flap -h\" for help.\n\n"
                         f"Error: Invalid interface name {flap_port}\n")
        return 2
    if words == ["pfc", "counters"]:
        out.append(pfc_counters(t))
    elif words[:2] == ["queue", "counters"] and len(words) <= 3:
        out.append(queue_counters(t, bool({"-j", "--json"} & set(flags)), port))
    elif words[:2] == ["queue", "wredcounters"] and len(words) <= 3:
        out.append(wred_counters(t, port))
    elif words == ["queue", "watermark", "unicast"]:
        out.append(queue_watermark(t))
    elif words == ["pfc", "priority"]:
        out.append(pfc_priority(t))
    elif words == ["pfcwd", "stats"]:
        out.append(pfcwd_stats(t))
    elif words in (["interfaces", "status"], ["interface", "status"]):
        out.append(_swdiag.sonic_status(t))
    elif words in (["interfaces", "counters"], ["interface", "counters"]):
        out.append(_swdiag.sonic_counters(t))
    elif words[:2] in (["interfaces", "flap"], ["interface", "flap"]) and len(words) <= 3:
        out.append(_swdiag.sonic_flap(t, flap_port))
    elif words == ["version"]:
        out.append(_swdiag.sonic_version(t))
    else:
        print("Usage: show [OPTIONS] COMMAND [ARGS]...\nTry \"show -h\" for help.\n\n"
              f"Error: No such command \"{' '.join(words) or '?'}\".", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
