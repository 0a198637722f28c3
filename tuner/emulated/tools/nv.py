"""Stand-in Cumulus Linux NVUE ``nv`` (CL 5.12 command forms; shared/reference/cumulus-nvue/).

Config is a tree (``nv config show`` shape) with a pending and an applied revision:
``nv set|unset qos congestion-control <profile> traffic-class <tcs> <field> <value>``,
``nv unset qos congestion-control <profile>``, ``nv set|unset interface <swp> qos
congestion-control [profile <name>]`` (CL >= 5.4), all staged; ``nv config apply [-y]``
(pending -> applied, all or nothing, refused when a profile has min >= max or an interface
names a profile that does not exist; ``default-global`` cannot be removed; with auto-save,
``state["auto_save"]``, on by default since CL 5.9, also the startup revision); ``nv config
apply --confirm [<time>]`` / ``--confirm-status`` / ``[<rev>] --confirm-yes|--confirm-no``
(see ``cmd_apply``; the rollback timer is ``tuner.emulated.nvued``); ``nv config revision -o
json``; ``nv config save``; ``nv config diff``; ``nv config show [-r startup] -o json``; ``nv
set qos mapping default-global dscp <d> switch-priority <p>`` and ``nv set qos
egress-queue-mapping default-global switch-priority <p> traffic-class <tc>`` over the stock
``nv set qos roce`` maps. Not documented by NVUE, and so chosen conservatively here: the
``--confirm-status`` text, ``--confirm-yes|--confirm-no``, the revision state ``confirm``, and
that no other apply is taken while one waits for confirmation.
Shows: ``qos congestion-control <profile> [traffic-class <tc>]``
(bytes as ``40000 B``), ``qos roce`` (human units, ``146.48 KB``, and the RoCE maps) and
``interface <swp> qos roce status`` (what the ASIC runs: thresholds rounded up to 64 cells of
144 B, ``153.00 KB`` for 150000 B, like the RoCE doc sample), ``qos pfc default-global``,
``interface <swp> counters qos``; for ``ecntune diagnose``, ``interface <swp> link`` and
``system`` (``_swdiag``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

from tuner.emulated import nvued
from tuner.emulated import state as st
from tuner.emulated import switches as swmod
from tuner.emulated.tools import _swdiag
from tuner.emulated.tools._base import Target, target

FIELDS = {"min-threshold": "int", "max-threshold": "int", "probability": "pct",
          "ecn": "onoff", "red": "onoff"}
DESCRIPTIONS = {"ecn": "Early Congestion Notification State",
                "max-threshold": "Maximum Threshold (in bytes)",
                "min-threshold": "Minimum Threshold (in bytes)",
                "probability": "Probability", "red": "Random Early Detection State"}


class NvError(Exception):
    pass


def human_bytes(n: int) -> str:
    """NVUE counter units: ``0 Bytes``, ``146.48 KB``, ``1.43 MB``, ``92824.38 GB``."""
    if n < 1024:
        return f"{n} Bytes"
    for unit, div in (("KB", 1024), ("MB", 1024**2)):
        if n < div * 1024:
            return f"{n / div:.2f} {unit}"
    return f"{n / 1024**3:.2f} GB"


def _table(headers: list[str], rows: list[list[str]], indent: str = "    ",
           pad_last: bool = True) -> list[str]:
    """NVUE tables: left-aligned, two spaces apart, column width = widest cell or header."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str], pad: bool) -> str:
        text = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
        return indent + (text if pad else text.rstrip())

    return [line(headers, False), line(["-" * w for w in widths], False),
            *(line(r, pad_last) for r in rows)]


def _value(field: str, raw: str) -> Any:
    kind = FIELDS[field]
    if kind == "onoff":
        if raw not in ("enable", "disable"):
            raise NvError(f"Error: Invalid Command: '{raw}' is not one of ['enable', 'disable']")
        return raw
    if not raw.isdigit():
        raise NvError(f"Error: Invalid Command: '{raw}' is not an integer")
    value = int(raw)
    if kind == "pct" and not 0 <= value <= 100:
        raise NvError(f"Error: Invalid Command: {value} is not in the range 0-100")
    return value


def _tcs(spec: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += [str(x) for x in range(int(lo), int(hi) + 1)]
        else:
            out.append(part)
    if not all(x.isdigit() and 0 <= int(x) <= 7 for x in out):
        raise NvError(f"Error: Invalid Command: traffic-class '{spec}' is not in 0-7")
    return out


def _cc(conf: dict[str, Any]) -> dict[str, Any]:
    return dict(conf["qos"]["congestion-control"])


def cmd_set(t: Target, words: list[str], unset: bool) -> None:
    verb = "unset" if unset else "set"
    bad = NvError(f"Error: Invalid Command: nv {verb} " + " ".join(words))
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        conf = s["pending"]
        if words[:2] == ["qos", "congestion-control"] and len(words) >= 3:
            _set_cc(conf, words[2:], unset, bad)
        elif words[:2] in (["qos", "mapping"], ["qos", "egress-queue-mapping"]) and not unset:
            _set_map(conf, words, bad)
        elif (words[:3] == ["maintenance", "unit", "all-protocols"] and not unset
              and len(words) == 5 and words[3] == "mode" and words[4] in ("enabled", "disabled")):
            conf.setdefault("maintenance", {}).setdefault("unit", {})["all-protocols"] = {
                "mode": words[4]}
        elif (words[:1] == ["interface"] and len(words) >= 4
              and words[2:4] == ["qos", "congestion-control"]):
            port = words[1]
            if port not in [*t.state["host_ports"], *t.state["uplink_ports"]]:
                raise NvError(f"Error: Invalid Command: interface '{port}' does not exist")
            qos = conf.setdefault("interface", {}).setdefault(port, {}).setdefault("qos", {})
            if unset:
                qos.pop("congestion-control", None)
            elif len(words) == 6 and words[4] == "profile":
                qos["congestion-control"] = {"profile": words[5]}
            else:
                raise bad
        else:
            raise bad
        st.write_json(t.dir / "state.json", s)


def _set_cc(conf: dict[str, Any], words: list[str], unset: bool, bad: NvError) -> None:
    profiles = conf["qos"]["congestion-control"]
    name = words[0]
    if len(words) == 1 and unset:
        if name == "default-global":
            raise NvError("Error: default-global cannot be removed")
        profiles.pop(name, None)
        return
    if len(words) < 3 or words[1] != "traffic-class":
        raise bad
    tcs = _tcs(words[2])
    rows = profiles.setdefault(name, {}).setdefault("traffic-class", {})
    if len(words) == 3 and unset:
        for tc in tcs:
            rows.pop(tc, None)
        return
    if len(words) < 4:
        raise bad
    field = words[3]
    if field not in FIELDS:
        raise NvError(f"Error: Invalid Command: unknown attribute '{field}'")
    value = None if unset else _value(field, words[4] if len(words) > 4 else "")
    for tc in tcs:
        row = rows.setdefault(tc, {})
        if unset:
            row.pop(field, None)
        else:
            row[field] = value


def confirm_seconds(raw: str) -> int:
    """``--confirm <time>``: a bare number is minutes (the NVUE reference: ``--confirm 60``
    "requires you to confirm within one hour"); ``s``/``m``/``h`` suffixes (``--confirm 300s``)
    are accepted too, but NVIDIA documents none: a real switch may refuse them."""
    m = re.fullmatch(r"([0-9]{1,6})([smh]?)", raw)
    if not m or int(m.group(1)) == 0:
        raise NvError(f"Error: Invalid Command: '{raw}' is not a confirm time "
                      "(<minutes> or <n>s|m|h)")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[m.group(2)]


def parse_apply(args: list[str]) -> tuple[str, int | None, str | None]:
    """``nv config apply [<revision>] [-y|--y|--assume-yes|--assume-no] [-m <message>]
    [--confirm [<time>] | --confirm-status | --confirm-yes | --confirm-no]`` ->
    (action, confirm seconds, revision). Anything else is refused like NVUE refuses it."""
    action, seconds, rev = "apply", None, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-y", "--y", "--assume-yes", "--assume-no"):
            pass
        elif a == "-m" and i + 1 < len(args):
            i += 1
        elif a == "--confirm":
            action = "confirm"
            nxt = args[i + 1] if i + 1 < len(args) else None
            seconds = 600  # "If you do not confirm within ten minutes"
            if nxt is not None and not nxt.startswith("-"):
                seconds = confirm_seconds(nxt)
                i += 1
        elif a in ("--confirm-status", "--confirm-yes", "--confirm-no") and action == "apply":
            action = a[2:]
        elif not a.startswith("-") and rev is None and i == 0:
            rev = a
        else:
            raise NvError(f"Error: Invalid Command: nv config apply {' '.join(args)}")
        i += 1
    if rev is not None and action not in ("confirm-yes", "confirm-no"):
        raise NvError("Error: this stand-in applies the pending revision only")
    return action, seconds, rev


def _validate(conf: dict[str, Any]) -> None:
    for name in _cc(conf):
        for tc in _cc(conf)[name].get("traffic-class", {}):
            row = swmod.nvue_tc(conf, name, tc) or {}
            if int(row["min-threshold"]) >= int(row["max-threshold"]):
                raise NvError(
                    f"Error: Config invalid at qos.congestion-control.{name}."
                    f"traffic-class.{tc}: min-threshold must be less than max-threshold")
    for port in conf.get("interface", {}):
        prof = swmod.nvue_port_profile(conf, port)
        if prof not in _cc(conf):
            raise NvError(f"Error: Config invalid at interface.{port}.qos.congestion-control"
                          f".profile: '{prof}' is not a congestion-control profile")


def cmd_apply(t: Target, args: list[str]) -> None:
    """Pending -> applied, all or nothing. With auto-save on (``state["auto_save"]``, the
    default since Cumulus Linux 5.9) a plain apply also becomes the startup configuration; an
    apply with ``--confirm`` is saved only once confirmed (``--confirm-yes``), and rolls back to
    the previous revision at its deadline (``tuner.emulated.nvued``) or on ``--confirm-no``."""
    action, seconds, rev = parse_apply(args)
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        pending = s.get("confirm")
        if action == "confirm-status":
            if not pending:
                print("no apply is waiting for confirmation")
                return
            left = max(0, int(pending["deadline"] - time.time()))
            print(f"revision {pending['rev']}: {left} s left before the automatic rollback")
            return
        if action in ("confirm-yes", "confirm-no"):
            if not pending or (rev is not None and rev != str(pending["rev"])):
                raise NvError("Error: no configuration apply is waiting for confirmation"
                              + (f" as revision {rev}" if rev else ""))
            if action == "confirm-yes":
                s.pop("confirm")
                if s.get("auto_save", True):
                    s["startup"] = st.json_copy(s["applied"])
            else:
                nvued.rollback(s, int(pending["rev"]))
            st.write_json(t.dir / "state.json", s)
            print(f"{'confirmed' if action == 'confirm-yes' else 'rolled back'} "
                  f"[rev_id: {pending['rev']}]")
            return
        if pending:  # one unconfirmed apply at a time
            raise NvError(f"Error: revision {pending['rev']} is waiting for confirmation "
                          "(nv config apply --confirm-yes|--confirm-no)")
        fail = t.faults.get("nv_apply_fail")
        if fail:
            raise NvError(f"Error: {fail}")
        conf = s["pending"]
        _validate(conf)
        changed = s["pending"] != s["applied"]
        previous = s["applied"]
        s["applied"] = st.json_copy(conf)
        s["rev_id"] = int(s.get("rev_id", 1)) + (1 if changed or seconds else 0)
        if action == "confirm":
            deadline = time.time() + int(seconds or 600)
            s["confirm"] = {"rev": s["rev_id"], "deadline": deadline, "previous": previous}
            _start_timer(t, s["rev_id"], deadline)
        elif s.get("auto_save", True):
            s["startup"] = st.json_copy(s["applied"])
        st.write_json(t.dir / "state.json", s)
    print(f"applied [rev_id: {s['rev_id']}]")


def _start_timer(t: Target, rev: int, deadline: float) -> None:
    """The rollback timer lives in the switch's NVUE daemon, not in this SSH session."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != st.ENV_NAME}
    env[nvued.ENV_DAEMON] = t.name
    subprocess.Popen([sys.executable, "-m", "tuner.emulated.nvued", str(t.dir), str(rev),
                      repr(deadline)], env=env, start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)


def cmd_revision(t: Target) -> None:
    """``nv config revision -o json``: the applied revision and its state (``confirm`` while
    it waits for confirmation; ``applied_and_saved`` once it is the startup one)."""
    s = t.state
    rev = int(s.get("rev_id", 1))
    st_word = ("confirm" if s.get("confirm") else
               "applied_and_saved" if s.get("startup") == s["applied"] else "applied")
    print(json.dumps({str(rev): {"state": st_word}}, indent=2))


def cmd_diff(t: Target) -> None:
    if t.state["pending"] != t.state["applied"]:
        print("- set:\n" + "\n".join("    " + line for line in json.dumps(
            t.state["pending"], indent=2, sort_keys=True).splitlines()))


def config_show(t: Target, rev: str = "applied") -> str:
    """``nv config show [-r startup] -o json``: the applied (or the saved startup) revision,
    header then the ``set`` tree."""
    header = {"model": "VX", "nvue-api-version": "nvue_v1", "rev-id": 1.0,
              "version": "Cumulus Linux 5.12.0"}
    tree = t.state["startup" if rev == "startup" else "applied"]
    return json.dumps([{"header": header}, {"set": tree}], indent=2) + "\n"


def _cell(field: str, value: Any) -> str:
    return f"{value} B" if field.endswith("threshold") else str(value)


def show_cc(t: Target, words: list[str], as_json: bool, rev: str) -> str:
    conf = t.state["applied" if rev in ("applied", "operational") else "pending"]
    name = words[2] if len(words) > 2 else "default-global"
    if name not in _cc(conf):
        raise NvError(f"Error: The requested item does not exist: congestion-control {name}")
    rows_by_tc = _cc(conf)[name].get("traffic-class", {})
    if len(words) >= 5 and words[3] == "traffic-class":
        tc = words[4]
        row = swmod.nvue_tc(conf, name, tc)
        if row is None:
            raise NvError(f"Error: The requested item does not exist: traffic-class {tc}")
        if as_json:
            return json.dumps(row, indent=2, sort_keys=True) + "\n"
        applied = swmod.nvue_tc(t.state["applied"], name, tc) or row
        rows = [[f, _cell(f, applied.get(f, "")), _cell(f, row[f]), DESCRIPTIONS[f]]
                for f in sorted(FIELDS)]
        second = "pending" if rev == "pending" else "applied"
        return "\n".join(_table(["", "operational", second, "description"], rows, "",
                                pad_last=False)) + "\n"
    full = {tc: swmod.nvue_tc(conf, name, tc) or {} for tc in rows_by_tc}
    if as_json:
        return json.dumps({"traffic-class": full}, indent=2, sort_keys=True) + "\n"
    rows = [[tc, r["ecn"], r["red"], f"{r['min-threshold']} B", f"{r['max-threshold']} B",
             str(r["probability"])] for tc, r in sorted(full.items(), key=lambda x: int(x[0]))]
    lines = ["    operational  applied  description", "--  -----------  -------  -----------",
             "", "ECN Configurations", "====================="]
    lines += _table(["traffic-class", "ECN", "RED", "Min Th", "Max Th", "Probability"], rows,
                    pad_last=False)
    return "\n".join(lines) + "\n"


def _kv(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """Key/value view: key (indented), operational, applied, description."""
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    w = [max(w[0], 18), max(w[1], 11), max(w[2], 7)]
    head = f"{'':<{w[0]}}  {'operational':<{w[1]}}  {'applied':<{w[2]}}  description"
    out = [head, f"{'-' * w[0]}  {'-' * w[1]}  {'-' * w[2]}  {'-' * 51}"]
    out += [f"{k:<{w[0]}}  {o:<{w[1]}}  {a:<{w[2]}}  {d}".rstrip() for k, o, a, d in rows]
    return out


def show_roce_status(t: Target, port: str) -> str:
    """``nv show interface <swp> qos roce status``: the port's effective congestion control
    in human units (CL 5.12 RoCE doc sample)."""
    if port not in [*t.state["host_ports"], *t.state["uplink_ports"]]:
        raise NvError(f"Error: The requested item does not exist: interface {port}")
    conf = t.state["applied"]
    tc = t.state["lossless_queue"]
    profile = swmod.nvue_port_profile(conf, port)
    row = swmod.nvue_tc(conf, profile, tc) or {}
    enabled = ",".join(str(c) for c in range(8)
                       if (swmod.nvue_tc(conf, profile, c) or {}).get("ecn") == "enable")
    # operational: what the ASIC runs (whole steps), not the configured bytes
    return "\n".join(_kv([
        ("congestion-control", "", "", ""),
        ("  congestion-mode", "ecn, absolute", "", "Congestion config mode"),
        ("  enabled-tc", enabled, "", "Congestion config enabled Traffic Class"),
        ("  max-threshold", human_bytes(swmod.spectrum_runs(row.get("max-threshold", 0))), "",
         "Congestion config max-threshold"),
        ("  min-threshold", human_bytes(swmod.spectrum_runs(row.get("min-threshold", 0))), "",
         "Congestion config min-threshold"),
        ("  probability", str(row.get("probability", "")), "", ""),
        ("pfc", "", "", ""),
        ("  pfc-priority", str(tc), "", "switch-prio on which PFC is enabled"),
        ("  rx-enabled", "yes", "", "PFC Rx Enabled status"),
        ("  tx-enabled", "yes", "", "PFC Tx Enabled status"),
        ("trust", "", "", ""),
        ("  trust-mode", "pcp,dscp", "", "Trust Setting on the port for packet classification"),
        ("mode", "lossless", "", "Roce Mode")]) + [
        " ", " ", "RoCE PCP/DSCP->SP mapping configurations",
        "===========================================",
        *_table(["", "pcp", "dscp", "switch-prio"],
                [["cnp", "6", "48", "6"], ["roce", str(tc), "26", str(tc)]]),
        " ", " ", "RoCE SP->TC mapping and ETS configurations",
        "=============================================",
        *_table(["", "switch-prio", "traffic-class", "scheduler-weight"],
                [["cnp", "6", "6", "strict priority"], ["roce", str(tc), str(tc), "dwrr-50%"]])
    ]) + "\n"


def show_maintenance(t: Target) -> str:
    """``nv show maintenance`` (Cumulus Linux 5.13+; NVUE reference, Show Commands / System)."""
    units = (t.state["applied"].get("maintenance") or {}).get("unit") or {}
    rows = [(u, "maintenance" if (units.get(u) or {}).get("mode") == "enabled" else "production")
            for u in ("all-protocols", "all-interfaces")]
    return "Maintenance Info \n============== \nUnit                                 State \n" \
        "-----------------------              --------------- \n" + "".join(
            f"{u:<37}{state} \n" for u, state in rows)


def show_roce(t: Target) -> str:
    """``nv show qos roce`` (global view of default-global, human units)."""
    conf = t.state["applied"]
    tc = t.state["lossless_queue"]
    row = swmod.nvue_tc(conf, "default-global", tc) or {}
    rows = [("enable", "", "on", ""), ("mode", "lossless", "lossless", ""),
            ("pfc", "", "", ""), ("  pfc-priority", str(tc), "", ""),
            ("congestion-control", "", "", ""), ("  congestion-mode", "ECN", "", ""),
            ("  enabled-tc", f"0,{tc}", "", ""),
            ("  min-threshold", human_bytes(int(row.get("min-threshold", 0))), "", ""),
            ("  max-threshold", human_bytes(int(row.get("max-threshold", 0))), "", ""),
            ("  probability", str(row.get("probability", "")), "", "")]
    dscp_sp, sp_tc = swmod.nvue_dscp_sp(conf), swmod.nvue_sp_tc(conf)
    pfc = conf["qos"]["pfc"]["default-global"]["switch-priority"]
    rows[3] = ("  pfc-priority", ",".join(sorted(pfc, key=int)), "", "")
    by_sp = [",".join(str(d) for d, p in dscp_sp.items() if p == sp) or "-" for sp in range(8)]
    return "\n".join([*_kv(rows), "RoCE PCP/DSCP->SP mapping configurations",
                      "===========================================",
                      *_table(["", "pcp", "dscp", "switch-prio"],
                              [[str(p), str(p), by_sp[p], str(p)] for p in range(8)]),
                      "RoCE SP->TC mapping and ETS configurations",
                      "=============================================",
                      *_table(["", "switch-prio", "traffic-class", "scheduler-weight"],
                              [[str(p), str(p), str(sp_tc[p]),
                                "strict-priority" if p == 6 else "DWRR-50%"]
                               for p in range(8)])]) + "\n"


def _set_map(conf: dict[str, Any], words: list[str], bad: NvError) -> None:
    """``qos mapping default-global dscp <d> switch-priority <p>`` and ``qos egress-queue-mapping
    default-global switch-priority <p> traffic-class <tc>`` (RoCE doc, last example)."""
    ok_map = (len(words) == 7 and words[1:3] == ["mapping", "default-global"]
              and words[3] == "dscp" and words[5] == "switch-priority")
    ok_egress = (len(words) == 7 and words[1:3] == ["egress-queue-mapping", "default-global"]
                 and words[3] == "switch-priority" and words[5] == "traffic-class")
    top = 63 if ok_map else 7
    if not (ok_map or ok_egress) or not all(w.isdigit() for w in (words[4], words[6])):
        raise bad
    if int(words[4]) > top or int(words[6]) > 7:
        raise NvError(f"Error: Invalid Command: {words[4]}/{words[6]} out of range")
    table = conf["qos"].setdefault(words[1], {}).setdefault("default-global", {})
    table.setdefault(words[3], {})[words[4]] = {words[5]: int(words[6])}


def show_pfc(t: Target) -> str:
    pfc = t.state["applied"]["qos"]["pfc"]["default-global"]
    rows = [("cable-length", str(pfc["cable-length"]), str(pfc["cable-length"]),
             "Cable Length (in meters)"),
            ("port-buffer", f"{pfc['port-buffer']} B", f"{pfc['port-buffer']} B",
             "Port Buffer (in bytes)"),
            ("rx", "enable", "enable", "PFC Rx State"), ("tx", "enable", "enable", "PFC Tx State"),
            ("xoff-threshold", f"{pfc['xoff-threshold']} B", f"{pfc['xoff-threshold']} B",
             "Xoff Threshold (in bytes)"),
            ("xon-threshold", f"{pfc['xon-threshold']} B", f"{pfc['xon-threshold']} B",
             "Xon Threshold (in bytes)"),
            ("[switch-priority]", ",".join(pfc["switch-priority"]),
             ",".join(pfc["switch-priority"]), "Collection of switch priorities.")]
    return "\n".join(_kv(rows)) + "\n"


def show_counters(t: Target, port: str, as_json: bool) -> str:
    ports = [*t.state["host_ports"], *t.state["uplink_ports"]]
    if port not in ports:
        raise NvError(f"Error: The requested item does not exist: interface {port}")
    t.tick_counter_faults()
    c = t.counters().get(port, {})
    ingress = {str(p): {"rx-frames": c.get(f"pg{p}_rx_pkts", 0),
                        "rx-buffer-discards": c.get(f"pg{p}_discard_bytes", 0),
                        "rx-shared-buffer-discards": 0} for p in range(8)}
    egress = {str(q): {"tx-frames": c.get(f"q{q}_pkts", 0), "tx-bytes": c.get(f"q{q}_bytes", 0),
                       "tx-uc-buffer-discards": c.get(f"q{q}_drop_bytes", 0),
                       "wred-discards": c.get(f"q{q}_wred_drop_pkts", 0)} for q in range(8)}
    pfc = {str(p): {"rx-pause-frames": c.get(f"pfc_rx_{p}", 0),
                    "rx-pause-duration": c.get(f"pfc_rx_dur_{p}", 0),
                    "tx-pause-frames": c.get(f"pfc_tx_{p}", 0),
                    "tx-pause-duration": c.get(f"pfc_tx_dur_{p}", 0)} for p in range(8)}
    ecn_marked = sum(c.get(f"q{q}_ecn_marked_pkts", 0) for q in range(8))
    rx_pause = sum(c.get(f"pfc_rx_{p}", 0) for p in range(8))
    tx_pause = sum(c.get(f"pfc_tx_{p}", 0) for p in range(8))
    if as_json:
        return json.dumps({
            "ingress-buffer-stats": ingress, "egress-queue-stats": egress, "pfc-stats": pfc,
            "port-stats": {"rx-stats": {"pause-frames": rx_pause},
                           "tx-stats": {"ecn-marked-packets": ecn_marked,
                                        "mc-buffer-discards": 0,
                                        "pause-frames": tx_pause}}}, indent=2) + "\n"
    out = ["Ingress Buffer Statistics", "============================"]
    out += _table(["priority-group", "rx-frames", "rx-buffer-discards",
                   "rx-shared-buffer-discards"],
                  [[p, str(v["rx-frames"]), human_bytes(v["rx-buffer-discards"]),
                    human_bytes(v["rx-shared-buffer-discards"])] for p, v in ingress.items()])
    out += ["", "Egress Queue Statistics", "=========================="]
    out += _table(["traffic-class", "tx-frames", "tx-bytes", "tx-uc-buffer-discards",
                   "wred-discards"],
                  [[q, str(v["tx-frames"]), human_bytes(v["tx-bytes"]),
                    human_bytes(v["tx-uc-buffer-discards"]), str(v["wred-discards"])]
                   for q, v in egress.items()])
    out += ["", "PFC Statistics", "================="]
    out += _table(["switch-priority", "rx-pause-frames", "rx-pause-duration",
                   "tx-pause-frames", "tx-pause-duration"],
                  [[p, *(str(v[k]) for k in ("rx-pause-frames", "rx-pause-duration",
                                             "tx-pause-frames", "tx-pause-duration"))]
                   for p, v in pfc.items()])
    out += ["", "Qos Port Statistics", "======================"]
    out += _table(["Counter", "Receive", "Transmit"],
                  [["ecn-marked-packets", "n/a", str(ecn_marked)],
                   ["mc-buffer-discards", "n/a", "0"],
                   ["pause-frames", str(rx_pause), str(tx_pause)]])
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    t = target("nv")
    if t.state.get("platform") != "nvue":
        print("bash: nv: command not found", file=sys.stderr)
        return 127
    if argv[:2] == ["config", "apply"]:
        try:
            cmd_apply(t, argv[2:])
        except NvError as e:
            print(str(e), file=sys.stderr)
            return 1
        return 0
    as_json, rev, words = False, "applied", []
    it = iter(argv)
    for a in it:
        if a in ("-o", "--output"):
            as_json = next(it, "") == "json"
        elif a in ("-r", "--rev"):
            rev = next(it, "applied")
        elif a in ("-y", "--assume-yes"):
            continue
        else:
            words.append(a)
    try:
        if words[:1] in (["set"], ["unset"]):
            cmd_set(t, words[1:], unset=words[0] == "unset")
        elif words == ["config", "revision"] and as_json:
            cmd_revision(t)
        elif words == ["config", "diff"]:
            cmd_diff(t)
        elif words == ["config", "show"]:
            if not as_json:
                raise NvError("Error: this stand-in prints `nv config show -o json` only")
            sys.stdout.write(config_show(t, rev))
        elif words == ["config", "save"]:  # applied -> startup (/etc/nvue.d/startup.yaml)
            with st.locked(t.dir):
                s = st.load_state(t.dir)
                s["startup"] = json.loads(json.dumps(s["applied"]))
                st.write_json(t.dir / "state.json", s)
        elif words[:1] == ["show"] and words[1:3] == ["qos", "congestion-control"]:
            sys.stdout.write(show_cc(t, words[1:], as_json, rev))
        elif words == ["show", "maintenance"]:
            sys.stdout.write(show_maintenance(t))
        elif words == ["show", "qos", "roce"]:
            sys.stdout.write(show_roce(t))
        elif words == ["show", "qos", "pfc", "default-global"]:
            sys.stdout.write(show_pfc(t))
        elif (words[:2] == ["show", "interface"] and len(words) == 6
              and words[3:] == ["qos", "roce", "status"]):
            sys.stdout.write(show_roce_status(t, words[2]))
        elif words[:2] == ["show", "interface"] and words[3:] == ["counters", "qos"]:
            sys.stdout.write(show_counters(t, words[2], as_json))
        elif words[:2] == ["show", "interface"] and words[3:] == ["link"]:
            if _swdiag.unknown_port(t, words[2]):
                raise NvError(f"Error: The requested item does not exist: interface {words[2]}")
            t.tick_counter_faults()
            sys.stdout.write(_swdiag.nvue_link(t, words[2]))
        elif words == ["show", "system"]:
            sys.stdout.write(_swdiag.nvue_system(t))
        else:
            raise NvError(f"Error: Invalid Command: nv {' '.join(words)}")
    except NvError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
