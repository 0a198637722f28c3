"""Stand-in ``counterpoll show`` and ``counterpoll <group> enable|disable|interval <ms>``
(format and ranges: sonic-utilities counterpoll/main.py, tests/counterpoll_test.py)."""

from __future__ import annotations

import sys
from typing import Any

from tuner.emulated.switches import WRED_ECN_SINCE, has_wred_ecn
from tuner.emulated.tools._fmt import click_no_such_command, simple_table
from tuner.emulated.tools._sonic_db import sonic_target, update

# CLI group -> (FLEX_COUNTER_TABLE key, `show` type, default interval text)
GROUPS = {"queue": ("QUEUE", "QUEUE_STAT", "default (10000)"),
          "port": ("PORT", "PORT_STAT", "default (1000)"),
          "pfcwd": ("PFCWD", "PFC_WD", "default (10000)"),
          "wredqueue": ("WRED_ECN_QUEUE", "WRED_ECN_QUEUE_STAT", "default (10000)"),
          "wredport": ("WRED_ECN_PORT", "WRED_ECN_PORT_STAT", "default (1000)")}
RANGE = {"queue": (100, 30000), "port": (100, 30000), "wredqueue": (100, 30000),
         "wredport": (100, 30000), "pfcwd": (100, 30000)}


def show(db: dict[str, Any]) -> str:
    table = db.get("FLEX_COUNTER_TABLE", {})
    rows = []
    for key, kind, default in GROUPS.values():
        if key in table:
            info = table[key]
            rows.append([kind, str(info.get("POLL_INTERVAL", default)),
                         info.get("FLEX_COUNTER_STATUS", "disable")])
    return simple_table(["Type", "Interval (in ms)", "Status"], rows, stralign="left")


def main(argv: list[str]) -> int:
    t = sonic_target("counterpoll")
    if argv[:1] in (["wredqueue"], ["wredport"]) and not has_wred_ecn(
            t.state.get("sonic_release", WRED_ECN_SINCE)):  # the groups came with 202505
        sys.stderr.write(click_no_such_command("counterpoll", argv[0]))
        return 2
    if argv == ["show"]:
        print(show(t.state["config_db"]))
        return 0
    if len(argv) >= 2 and argv[0] in GROUPS and argv[1] in ("enable", "disable", "interval"):
        key = GROUPS[argv[0]][0]
        if argv[1] == "interval":
            lo, hi = RANGE[argv[0]]
            if len(argv) != 3 or not argv[2].isdigit() or not lo <= int(argv[2]) <= hi:
                print(f"Error: Invalid value for 'POLL_INTERVAL': {argv[2:] and argv[2]} is not "
                      f"in the range {lo}<=x<={hi}.", file=sys.stderr)
                return 2
            field, value = "POLL_INTERVAL", argv[2]
        else:
            field, value = "FLEX_COUNTER_STATUS", argv[1]
        update(t, lambda db: db.setdefault("FLEX_COUNTER_TABLE", {}).setdefault(key, {})
               .__setitem__(field, value))
        return 0
    print("Usage: counterpoll [OPTIONS] COMMAND [ARGS]...\nError: No such command "
          f"\"{' '.join(argv) or '?'}\".", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
