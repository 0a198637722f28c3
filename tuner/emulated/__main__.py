"""``python -m tuner.emulated up ROOT`` / ``down ROOT``: an emulated cluster for a dry run by hand.

``up`` starts the sshd listeners, prints the inventory path and returns (the daemons keep
running); ``down`` stops everything that ``up`` started under ROOT (pidfiles + session
processes). ``up --wait`` stays in the foreground until Ctrl-C instead.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def _switch_spec(text: str) -> tuple[str, str]:
    name, _, platform = text.partition(":")
    return name, platform or "sonic"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.emulated")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start an emulated cluster under ROOT")
    up.add_argument("root", type=Path)
    up.add_argument("--hosts", type=int, default=4)
    up.add_argument("--switch", action="append", metavar="NAME:PLATFORM",
                    help="repeatable, e.g. leaf0:sonic (default leaf0:sonic leaf1:nvue)")
    up.add_argument("--base-address", default="127.0.10.")
    up.add_argument("--port", type=int, default=22)
    up.add_argument("--wait", action="store_true", help="stay in the foreground until Ctrl-C")
    up.add_argument("--sonic-release", default="202505",
                    help="release the SONiC switches play (202411: no WRED/ECN queue counters)")
    up.add_argument("--rails", type=int, default=1,
                    help="NIC ports (and GPUs) per host, mlx5_0..: 8 plays a GPU host with "
                         "eight rails (the inventory then lists rails)")
    up.add_argument("--stock-qos", action="store_true",
                    help="leave SONiC's stock QoS maps (DSCP 26 -> lossy TC 1: pre-flight "
                         "refuses); default: the operator's fix DSCP 26 -> TC 3 is applied")
    down = sub.add_parser("down", help="stop the emulated cluster under ROOT")
    down.add_argument("root", type=Path)
    args = parser.parse_args(argv)

    from tuner.emulated.cluster import EmulatedCluster, EmulatedClusterError
    from tuner.errors import ConfigError

    if args.cmd == "up":
        switches: list[tuple[str, str]] | None = None
        if args.switch:
            switches = [_switch_spec(s) for s in args.switch]
        try:
            emu = EmulatedCluster(args.root, hosts=args.hosts, switches=switches,
                                  base_address=args.base_address, port=args.port,
                                  sonic_release=args.sonic_release,
                                  operator_fix=not args.stock_qos, rails=args.rails)
            emu.start()
        except (EmulatedClusterError, ConfigError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        (emu.root / "cluster.json").write_text(json.dumps({
            "hosts": args.hosts, "switches": switches, "base_address": args.base_address,
            "port": args.port}))
        print(f"inventory: {emu.inventory_path}")
        for t in emu.targets.values():
            print(f"  {t.name:<8} {t.address}:{emu.port}  "
                  f"{t.platform or t.nic_layout}")
        print(f"ssh -i {emu.client_key} -o UserKnownHostsFile={emu.known_hosts} "
              f"root@{emu.targets['host0'].address} ethtool -S ens1f0np0")
        if args.wait:
            try:
                signal.sigwait({signal.SIGINT, signal.SIGTERM})
            finally:
                emu.stop()
        return 0
    saved = json.loads((args.root / "cluster.json").read_text())
    saved_sw = [(str(a), str(b)) for a, b in saved["switches"]] if saved["switches"] else None
    emu = EmulatedCluster(args.root, hosts=saved["hosts"], switches=saved_sw,
                          base_address=saved["base_address"], port=saved["port"])
    emu.stop()
    print(f"stopped emulated cluster under {emu.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
