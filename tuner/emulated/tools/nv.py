"""Stand-in Cumulus Linux NVUE ``nv`` (CL 5.12 command forms; shared/reference/cumulus-nvue/).

Supported: ``nv set|unset qos congestion-control default-global traffic-class <tcs> <field>
<value>`` (staged in the pending revision), ``nv config apply [-y]`` (pending -> applied, all or
nothing), ``nv config diff``, ``nv show qos congestion-control default-global [traffic-class
<tc>] [-o json] [-r pending|applied]``, ``nv show interface <swp> counters qos [-o json]``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tuner.emulated import state as st
from tuner.emulated.tools._base import Target, target

FIELDS = {"min-threshold": "int", "max-threshold": "int", "probability": "pct",
          "ecn": "onoff", "red": "onoff"}
DESCRIPTIONS = {"ecn": "Early Congestion Notification State",
                "max-threshold": "Maximum Threshold (in bytes)",
                "min-threshold": "Minimum Threshold (in bytes)",
                "probability": "Probability", "red": "Random Early Detection State"}
CC = ["qos", "congestion-control", "default-global"]


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


def cmd_set(t: Target, words: list[str], unset: bool) -> None:
    if words[:3] != CC or len(words) < 6 or words[3] != "traffic-class":
        raise NvError(f"Error: Invalid Command: nv {'unset' if unset else 'set'} "
                      + " ".join(words))
    tcs, field = _tcs(words[4]), words[5]
    if field not in FIELDS:
        raise NvError(f"Error: Invalid Command: unknown attribute '{field}'")
    value = None if unset else _value(field, words[6] if len(words) > 6 else "")
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        for tc in tcs:
            row = s["pending"].setdefault(tc, {"ecn": "enable", "red": "disable",
                                               "min-threshold": 150000,
                                               "max-threshold": 1500000, "probability": 100})
            if unset:
                if field in ("ecn", "red"):
                    row[field] = "enable" if field == "ecn" else "disable"
                else:
                    row[field] = {"min-threshold": 150000, "max-threshold": 1500000,
                                  "probability": 100}[field]
            else:
                row[field] = value
        st.write_json(t.dir / "state.json", s)


def cmd_apply(t: Target) -> None:
    fail = t.faults.get("nv_apply_fail")
    if fail:
        raise NvError(f"Error: {fail}")
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        for tc, row in s["pending"].items():
            if int(row["min-threshold"]) >= int(row["max-threshold"]):
                raise NvError(
                    f"Error: Config invalid at qos.congestion-control.default-global."
                    f"traffic-class.{tc}: min-threshold must be less than max-threshold")
        changed = s["pending"] != s["applied"]
        s["applied"] = json.loads(json.dumps(s["pending"]))
        s["rev_id"] = int(s.get("rev_id", 1)) + (1 if changed else 0)
        st.write_json(t.dir / "state.json", s)
    print(f"applied [rev_id: {s['rev_id']}]")


def cmd_diff(t: Target) -> None:
    for tc, row in sorted(t.state["pending"].items()):
        old = t.state["applied"].get(tc, {})
        for field in sorted(row):
            if old.get(field) != row[field]:
                print(f"- set:\n    qos:\n      congestion-control:\n        default-global:\n"
                      f"          traffic-class:\n            '{tc}':\n"
                      f"              {field}: {row[field]}")


def _cell(field: str, value: Any) -> str:
    return f"{value} B" if field.endswith("threshold") else str(value)


def show_cc(t: Target, words: list[str], as_json: bool, rev: str) -> str:
    conf = t.state["applied" if rev in ("applied", "operational") else rev
                   if rev == "startup" else "pending"]
    if len(words) >= 5 and words[3] == "traffic-class":
        tc = words[4]
        row = conf.get(tc)
        if row is None:
            raise NvError(f"Error: The requested item does not exist: traffic-class {tc}")
        if as_json:
            return json.dumps(row, indent=2, sort_keys=True) + "\n"
        applied = t.state["applied"].get(tc, row)
        rows = [[f, _cell(f, applied.get(f, "")), _cell(f, row[f]), DESCRIPTIONS[f]]
                for f in sorted(FIELDS)]
        second = "pending" if rev == "pending" else "applied"
        return "\n".join(_table(["", "operational", second, "description"], rows, "",
                                pad_last=False)) + "\n"
    if as_json:
        return json.dumps({"traffic-class": conf}, indent=2, sort_keys=True) + "\n"
    rows = [[tc, r["ecn"], r["red"], f"{r['min-threshold']} B", f"{r['max-threshold']} B",
             str(r["probability"])] for tc, r in sorted(conf.items(), key=lambda x: int(x[0]))]
    lines = ["    operational  applied  description", "--  -----------  -------  -----------",
             "", "ECN Configurations", "====================="]
    lines += _table(["traffic-class", "ECN", "RED", "Min Th", "Max Th", "Probability"], rows,
                    pad_last=False)
    return "\n".join(lines) + "\n"


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
    as_json, rev, words = False, "applied", []
    it = iter(argv)
    for a in it:
        if a in ("-o", "--output"):
            as_json = next(it, "") == "json"
        elif a in ("-r", "--rev"):
            rev = next(it, "applied")
        elif a in ("--startup", "--applied", "--pending", "--operational"):
            rev = a[2:]
        elif a in ("-y", "--assume-yes"):
            continue
        else:
            words.append(a)
    try:
        if words[:1] in (["set"], ["unset"]):
            cmd_set(t, words[1:], unset=words[0] == "unset")
        elif words == ["config", "apply"]:
            cmd_apply(t)
        elif words == ["config", "diff"]:
            cmd_diff(t)
        elif words == ["config", "save"]:  # applied -> startup (/etc/nvue.d/startup.yaml)
            with st.locked(t.dir):
                s = st.load_state(t.dir)
                s["startup"] = json.loads(json.dumps(s["applied"]))
                st.write_json(t.dir / "state.json", s)
        elif words[:1] == ["show"] and words[1:4] == CC:
            sys.stdout.write(show_cc(t, words[1:], as_json, rev))
        elif words[:2] == ["show", "interface"] and words[3:] == ["counters", "qos"]:
            sys.stdout.write(show_counters(t, words[2], as_json))
        else:
            raise NvError(f"Error: Invalid Command: nv {' '.join(words)}")
    except NvError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
