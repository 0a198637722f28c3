"""Stand-in ``sonic-cfggen`` for reading config data: ``-d`` (the running CONFIG_DB) or
``-j /etc/sonic/config_db.json`` (the saved file, see ``sonic_config``), with ``--var-json TABLE``
(one table as JSON) or ``--print-data`` (everything). Writing (``--write-to-db``) and templates
are not emulated.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tuner.emulated.tools._base import target

SAVED = "/etc/sonic/config_db.json"


def main(argv: list[str]) -> int:
    t = target("sonic-cfggen")
    if t.state.get("platform") != "sonic":
        print("bash: sonic-cfggen: command not found", file=sys.stderr)
        return 127
    data: dict[str, Any] | None = None
    table: str | None = None
    it = iter(argv)
    for a in it:
        if a == "-d":
            data = t.state["config_db"]
        elif a == "-j":
            path = next(it, "")
            if path != SAVED:
                print(f"[Errno 2] No such file or directory: '{path}'", file=sys.stderr)
                return 1
            data = t.state.get("saved_config_db", t.state["config_db"])
        elif a == "--var-json":
            table = next(it, "")
        elif a != "--print-data":
            print(f"sonic-cfggen: error: unrecognized arguments: {a}", file=sys.stderr)
            return 2
    if data is None:
        print("sonic-cfggen: error: no data source (-d or -j)", file=sys.stderr)
        return 2
    print(json.dumps(data.get(table, {}) if table else data, indent=4, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
