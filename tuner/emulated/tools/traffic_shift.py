"""Stand-in SONiC ``TSA`` / ``TSB`` / ``TSC``: traffic shift away, back, and check. The state is
CONFIG_DB ``BGP_DEVICE_GLOBAL|STATE`` ``tsa_enabled``, where sonic-buildimage's scripts keep
it; ``TSC`` prints the ``System Mode: ...`` line sonic-mgmt's traffic-shift tests read."""

from __future__ import annotations

import sys
from typing import Any

from tuner.emulated.tools._sonic_db import sonic_target, update

KEY = "STATE"


def _shift(db: dict[str, Any], on: bool) -> None:
    db.setdefault("BGP_DEVICE_GLOBAL", {}).setdefault(KEY, {})["tsa_enabled"] = (
        "true" if on else "false")


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else ""
    t = sonic_target(verb or "TSC")
    if verb in ("TSA", "TSB"):
        update(t, lambda db: _shift(db, verb == "TSA"))
        change = "Normal -> Maintenance" if verb == "TSA" else "Maintenance -> Normal"
        print(f"System Mode: {change}")
        return 0
    if verb == "TSC":
        row = (t.state["config_db"].get("BGP_DEVICE_GLOBAL") or {}).get(KEY) or {}
        print("System Mode: " + ("Maintenance" if row.get("tsa_enabled") == "true" else "Normal"))
        return 0
    print(f"traffic_shift: unknown command {verb!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
