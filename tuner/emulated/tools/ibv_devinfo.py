"""Stand-in ``ibv_devinfo -d <ibdev> -i <port>`` (rdma-core devinfo.c format, tab-indented).
``active_mtu`` is what mlx5 derives from the netdev MTU (``iboe_get_mtu``: the largest IB MTU
not above MTU - 88), unless ``state["roce_mtu"]`` pins another value."""

from __future__ import annotations

import sys

from tuner.emulated.tools._base import target

IB_MTUS = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


def main(argv: list[str]) -> int:
    t = target("ibv_devinfo")
    s = t.state
    if s["kind"] != "host":
        print("bash: ibv_devinfo: command not found", file=sys.stderr)
        return 127
    dev = argv[argv.index("-d") + 1] if "-d" in argv and argv.index("-d") + 1 < len(argv) else None
    if dev not in (None, s["rdma_device"]):
        print(f"IB device '{dev}' wasn't found", file=sys.stderr)
        return 255
    fits = [m for m in IB_MTUS if m <= int(s["mtu"]) - 88]
    active = int(s.get("roce_mtu") or (fits[-1] if fits else 256))
    fw = t.faults.get("firmware") or s.get("firmware", "22.41.1000")
    print(f"hca_id:\t{s['rdma_device']}\n\ttransport:\t\t\tInfiniBand (0)\n"
          f"\tfw_ver:\t\t\t\t{fw}\n\tphys_port_cnt:\t\t\t1\n"
          "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
          "\t\t\tmax_mtu:\t\t4096 (5)\n"
          f"\t\t\tactive_mtu:\t\t{active} ({IB_MTUS.get(active, 0)})\n"
          "\t\t\tsm_lid:\t\t\t0\n\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n"
          "\t\t\tlink_layer:\t\tEthernet\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
