"""Stand-in ``ip link show [dev] <if>`` (iproute2 format) for MTU and link state checks."""

from __future__ import annotations

import sys

from tuner.emulated.tools._base import target


def main(argv: list[str]) -> int:
    t = target("ip")
    words = [a for a in argv if a not in ("dev",)]
    if words[:1] not in (["link"], ["l"]) or (len(words) > 1 and words[1] not in (
            "show", "list", "ls")):
        print("ip: the emulated ip only supports 'ip link show <if>'", file=sys.stderr)
        return 1
    s = t.state
    ifname = words[2] if len(words) > 2 else s["netdev"]
    if ifname != s["netdev"]:
        print(f'Device "{ifname}" does not exist.', file=sys.stderr)
        return 1
    down = bool(t.faults.get("link_down"))
    flags = "BROADCAST,MULTICAST" if down else "BROADCAST,MULTICAST,UP,LOWER_UP"
    state = "DOWN" if down else "UP"
    mac = f"b8:3f:d2:10:00:{int(t.name.lstrip('host') or 0) % 256:02x}"
    print(f"2: {ifname}: <{flags}> mtu {s['mtu']} qdisc mq state {state} mode DEFAULT "
          f"group default qlen 1000\n    link/ether {mac} brd ff:ff:ff:ff:ff:ff")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
