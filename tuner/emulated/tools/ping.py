"""Stand-in ``ping [-M do] [-c N] [-W s] [-s size] [-I if] <address>`` (iputils wording).

The path is the two hosts' ports: a don't-fragment packet larger than the sender's MTU fails
locally (``ping: local error: message too long, mtu=1500``), one larger than the receiver's
MTU is dropped there (100% packet loss), as is every packet to or from a port that is down.
"""

from __future__ import annotations

import sys

from tuner.emulated import state as st
from tuner.emulated.tools._base import target


def _opt(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) \
        else default


def _peer(root: object, address: str) -> dict | None:
    from pathlib import Path

    for path in sorted(Path(str(root)).glob("*/state.json")):
        s = st.read_json(path) or {}
        if s.get("kind") == "host" and s.get("address") == address:
            return dict(s, _faults=st.load_faults(path.parent))
    return None


def _stats(addr: str, received: int) -> str:
    loss = 0 if received else 100
    out = (f"\n--- {addr} ping statistics ---\n1 packets transmitted, {received} received, "
           f"{loss}% packet loss, time 0ms\n")
    return out + ("rtt min/avg/max/mdev = 0.045/0.045/0.045/0.000 ms\n" if received else "")


def main(argv: list[str]) -> int:
    t = target("ping")
    s = t.state
    addr = argv[-1] if argv else ""
    size = int(_opt(argv, "-s", "56") or 56)
    iface = _opt(argv, "-I")
    if iface is not None and iface not in (s["netdev"], s["address"]):
        print(f"ping: SO_BINDTODEVICE {iface}: No such device", file=sys.stderr)
        return 2
    df = _opt(argv, "-M") == "do"
    frame = size + 28  # ICMP payload + 8 (ICMP) + 20 (IPv4)
    src = f" from {s['address']} {iface}:" if iface else ""
    print(f"PING {addr} ({addr}){src} {size}({frame}) bytes of data.")
    if df and frame > int(s["mtu"]):
        print(f"ping: local error: message too long, mtu={int(s['mtu'])}", file=sys.stderr)
        print(_stats(addr, 0), end="")
        return 1
    peer = _peer(t.root, addr)
    ok = (peer is not None and not t.faults.get("link_down")
          and not peer["_faults"].get("link_down") and frame <= int(peer["mtu"]))
    if ok:
        print(f"{size + 8} bytes from {addr}: icmp_seq=1 ttl=64 time=0.045 ms")
    print(_stats(addr, 1 if ok else 0), end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
