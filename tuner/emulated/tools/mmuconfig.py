"""Stand-in ``mmuconfig -l``: BUFFER_POOL and BUFFER_PROFILE as ``Pool: <name>`` /
``Profile: <name>`` two-column tabulate tables (format: sonic-utilities scripts/mmuconfig and its
tests' expected output)."""

from __future__ import annotations

import sys
from typing import Any

from tuner.emulated.tools._sonic_db import sonic_target


def _table(fields: dict[str, Any]) -> str:
    rows = sorted((k, str(v)) for k, v in fields.items())
    w0 = max(len(k) for k, _ in rows)
    w1 = max(len(v) for _, v in rows)
    rule = "-" * w0 + "  " + "-" * w1
    return "\n".join([rule, *(f"{k:<{w0}}  {v}" for k, v in rows), rule])


def main(argv: list[str]) -> int:
    t = sonic_target("mmuconfig")
    if argv not in (["-l"], ["--list"]):
        print("Usage: mmuconfig [-l] [-p PROFILE ...]; this stand-in lists only", file=sys.stderr)
        return 2
    db = t.state["config_db"]
    for kind, table in (("Pool", "BUFFER_POOL"), ("Profile", "BUFFER_PROFILE")):
        for name, fields in db.get(table, {}).items():
            print(f"{kind}: {name}\n{_table(fields)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
