"""Stand-in ``sonic-cfggen -d --var-json <TABLE>`` (one CONFIG_DB table as JSON, indent 4) and
``sonic-cfggen -d --print-data`` (all of CONFIG_DB); ``-j /etc/sonic/config_db.json`` instead of
``-d`` reads the saved configuration (``saved_config_db``, written by ``config save``)."""

from __future__ import annotations

import json
import sys

from tuner.emulated.tools._sonic_db import sonic_target

SAVED = "/etc/sonic/config_db.json"


def main(argv: list[str]) -> int:
    t = sonic_target("sonic-cfggen")
    db = t.state["config_db"]
    if argv[:2] == ["-j", SAVED]:  # the saved file the switch boots from (``config save``)
        db = t.state.get("saved_config_db", db)
        argv = ["-d", *argv[2:]]
    if argv == ["-d", "--print-data"]:
        print(json.dumps(db, indent=4, sort_keys=True))
        return 0
    if "-d" not in argv or "--var-json" not in argv or argv.index("--var-json") + 1 >= len(argv):
        print("sonic-cfggen: this stand-in supports `-d|-j /etc/sonic/config_db.json` with "
              "`--var-json TABLE` or `--print-data`", file=sys.stderr)
        return 2
    table = argv[argv.index("--var-json") + 1]
    print(json.dumps(db.get(table, {}), indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
