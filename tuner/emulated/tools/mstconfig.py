"""Stand-in ``mstconfig``/``mlxconfig [-e] -d <pci> query [PARAM ...]`` for the RoCE
congestion-control NVCONFIG parameters (format: shared/reference/mlx5-dcqcn-config/
mstconfig-query-cx4lx-roce-cc-defaults.txt; names and enums: mstflint's mlxconfig_host.db).
``state["cc_algorithm"]`` (default ``ECN(0)``, i.e. DCQCN) is what ``ROCE_CC_ALGORITHM_P1/P2``
print (in the Current and Next Boot columns with ``-e``)."""

from __future__ import annotations

import sys

from tuner.emulated.tools._base import target


def main(argv: list[str]) -> int:
    t = target("mstconfig")
    if t.state["kind"] != "host":
        print("bash: mstconfig: command not found", file=sys.stderr)
        return 127
    extended = "-e" in argv
    argv = [a for a in argv if a != "-e"]
    if len(argv) < 3 or argv[0] != "-d" or argv[2] != "query":
        print("-E- Unknown or missing command; usage: mstconfig -d <device> query [PARAM ...]",
              file=sys.stderr)
        return 1
    if argv[1] not in (t.state["pci"], t.state["pci"][5:]):
        print(f"-E- Failed to open device: {argv[1]}. No such device", file=sys.stderr)
        return 1
    algo = str(t.state.get("cc_algorithm", "ECN(0)"))
    values = {"ROCE_CC_PRIO_MASK_P1": "255", "ROCE_CC_ALGORITHM_P1": algo,
              "ROCE_CC_PRIO_MASK_P2": "255", "ROCE_CC_ALGORITHM_P2": algo}
    asked = argv[3:] or list(values)
    unknown = [a for a in asked if a not in values]
    if unknown:
        print(f"-E- The Device doesn't support {unknown[0]} parameter", file=sys.stderr)
        return 1
    print("\nDevice #1:\n----------\n")
    print(f"Device type:    ConnectX6DX     \nName:           N/A             \n"
          f"Description:    N/A             \nDevice:         {argv[1]}         \n")
    if extended:  # -e: Default, Current, Next Boot (the firmware runs Current)
        print("Configurations:                              Default         Current         "
              "Next Boot")
        for name in asked:
            default = "ECN(0)" if "ALGORITHM" in name else "255"
            print(f"         {name:<36}{default:<16}{values[name]:<16}{values[name]:<16}")
        return 0
    print("Configurations:                              Next Boot")
    for name in asked:
        print(f"         {name:<36}{values[name]:<16}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
