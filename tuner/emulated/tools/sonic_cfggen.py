"""Stand-in ``sonic-cfggen -d --var-json <TABLE>`` (one CONFIG_DB table as JSON, indent 4) and
``sonic-cfggen -d --print-data`` (all of CONFIG_DB)."""

from __future__ import annotations

import json
import sys

from tuner.emulated.tools._sonic_db import sonic_target


def main(argv: list[str]) -> int:
    t = sonic_target("sonic-cfggen")
    if argv == ["-d", "--print-data"]:
        print(json.dumps(t.state["config_db"], indent=4, sort_keys=True))
        return 0
    if "-d" not in argv or "--var-json" not in argv or argv.index("--var-json") + 1 >= len(argv):
        print("sonic-cfggen: this stand-in supports `-d --var-json TABLE` and `-d --print-data`",
              file=sys.stderr)
        return 2
    table = argv[argv.index("--var-json") + 1]
    print(json.dumps(t.state["config_db"].get(table, {}), indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
