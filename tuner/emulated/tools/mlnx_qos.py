"""Stand-in ``mlnx_qos`` (Mellanox/mlnx-tools python/mlnx_qos, show format L294-366).

``mlnx_qos -i <if>`` shows; ``--trust pcp|dscp`` and ``-f/--pfc 0,0,0,1,0,0,0,0`` change the
state (so a pre-flight test can break PFC or trust and watch the check fail).
"""

from __future__ import annotations

import sys

from tuner.emulated import state as st
from tuner.emulated.tools._base import target


def render(s: dict) -> str:
    qos = s["qos"]
    pfc = qos["pfc"]
    lines = [f"DCBX mode: {qos['dcbx']}", f"Priority trust state: {qos['trust']}"]
    if qos["trust"] == "dscp":
        lines.append("dscp2prio mapping:")
        for p in range(8):
            dscps = ",".join(f"{d:02d}" for d in range(8 * p + 7, 8 * p - 1, -1))
            lines.append(f"\tprio:{p} dscp:{dscps},")
    lines += ["Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016",
              "Cable len: 7", "PFC configuration:",
              "\tpriority    0   1   2   3   4   5   6   7",
              "\tenabled     " + "".join(f"{v}   " for v in pfc),
              "\tbuffer      " + "".join(f"{v}   " for v in pfc)]
    roce = int(s.get("roce_priority", 3))
    lines.append("tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%")
    lines += [f"\t priority:  {p}" for p in range(8) if p not in (roce, 6)]
    lines.append(f"tc: {roce} ratelimit: unlimited, tsa: ets, bw: 50%")
    lines.append(f"\t priority:  {roce}")
    lines.append("tc: 6 ratelimit: unlimited, tsa: vendor")
    lines.append("\t priority:  6")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    t = target("mlnx_qos")
    ifname, trust, pfc = None, None, None
    it = iter(argv)
    for a in it:
        if a in ("-i", "--interface"):
            ifname = next(it, None)
        elif a == "--trust":
            trust = next(it, "")
            if trust not in ("pcp", "dscp"):
                print(f"mlnx_qos: error: argument --trust: invalid choice: '{trust}' "
                      "(choose from 'pcp', 'dscp')", file=sys.stderr)
                return 2
        elif a in ("-f", "--pfc"):
            raw = next(it, "").split(",")
            if len(raw) != 8 or any(x not in ("0", "1") for x in raw):
                print("PFC configuration: 8 values of 0/1 expected", file=sys.stderr)
                return 1
            pfc = [int(x) for x in raw]
    if ifname is None:
        print("mlnx_qos: error: the following arguments are required: -i/--interface",
              file=sys.stderr)
        return 2
    if ifname != t.state["netdev"]:
        print(f"Interface {ifname} does not exist", file=sys.stderr)
        return 1
    s = t.state
    if trust or pfc:
        with st.locked(t.dir):
            s = st.load_state(t.dir)
            if trust:
                s["qos"]["trust"] = trust
            if pfc:
                s["qos"]["pfc"] = pfc
            st.write_json(t.dir / "state.json", s)
    sys.stdout.write(render(s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
