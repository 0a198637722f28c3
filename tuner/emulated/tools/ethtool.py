"""Stand-in ``ethtool``: ``-S <if>`` (NIC statistics), ``-i <if>`` (driver info), ``<if>``,
``--show-fec <if>``, ``-m <if>``.

Formats: shared/reference/mlx5-ethtool/ (5-space indent, ``name: value``; per-priority pause
rows exist only for PFC-enabled priorities, as in en_stats.c); ``--show-fec`` as ethtool's
netlink/fec.c prints it (docs/reference-notes/diagnose-formats.md). The port is a DAC whose
module EEPROM is not readable (``supports-eeprom-access: no``), so ``-m`` fails like ethtool's
ioctl path does.
"""

from __future__ import annotations

import sys

from tuner.emulated import hosts
from tuner.emulated.tools._base import target


def main(argv: list[str]) -> int:
    t = target("ethtool")
    args = [a for a in argv if a]
    if not args:
        print("ethtool: bad command line argument(s)\nFor more information run ethtool -h",
              file=sys.stderr)
        return 1
    opt, ifname = (args[0], args[1] if len(args) > 1 else "") if args[0].startswith("-") \
        else ("", args[0])
    rail = hosts.rail_of(t.state, netdev=ifname)
    if rail is None:
        print(f"netlink error: no device matches name ({ifname or '?'})", file=sys.stderr)
        print("netlink error: No such device", file=sys.stderr)
        return 1
    link_up = not t.faults.get("link_down")
    if opt in ("-S", "--statistics"):
        t.tick_counter_faults()
        counters = t.counters().get(ifname, {})
        print("NIC statistics:")
        for name, value in hosts.ethtool_stats(t.state, counters):
            print(f"     {name}: {value}")
        return 0
    if opt in ("-i", "--driver"):
        print("driver: mlx5_core\nversion: 24.10-1.1.4\n"
              f"firmware-version: {t.faults.get('firmware') or t.state['firmware']} "
              "(MT_0000000838)\n"
              f"expansion-rom-version: \nbus-info: {rail['pci']}\n"
              "supports-statistics: yes\nsupports-test: yes\nsupports-eeprom-access: no\n"
              "supports-register-dump: no\nsupports-priv-flags: yes")
        return 0
    if opt == "--show-fec":
        fec = "Off" if t.faults.get("fec_off") else "RS"
        print(f"FEC parameters for {ifname}:\nSupported/Configured FEC encodings: "
              f"{'Off' if fec == 'Off' else 'Auto RS'}\nActive FEC encoding: {fec}")
        return 0
    if opt in ("-m", "--dump-module-eeprom", "--module-info"):
        print("Cannot get module EEPROM information: Operation not supported", file=sys.stderr)
        return 1
    if opt == "":
        speed = f"{t.state['speed_mbps']}Mb/s" if link_up else "Unknown!"
        print(f"Settings for {ifname}:\n\tSpeed: {speed}\n\tDuplex: "
              f"{'Full' if link_up else 'Unknown! (255)'}\n\tPort: Direct Attach Copper\n"
              f"\tLink detected: {'yes' if link_up else 'no'}")
        return 0
    print(f"ethtool: option {opt} is not supported by the emulated ethtool", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
