"""Stand-in ``sonic-cfggen -d --var-json <TABLE>`` (one CONFIG_DB table as JSON, indent 4) and
``sonic-cfggen -d --print-data`` (all of CONFIG_DB); ``-j /etc/sonic/config_db.json`` instead of
``-d`` reads the saved configuration (``saved_config_db``, written by ``config save``).
``sonic-cfggen -d -t <hwsku dir>/qos.json.j2 [-y <yml>]`` prints what the switch's QoS template
renders (``qos_template``: the stock tables), as the real one does for a template without an
output file; another template path fails like jinja2's loader (``TemplateNotFound``)."""

from __future__ import annotations

import json
import sys
from typing import Any

from tuner.emulated.switches import SONIC_HWSKU, SONIC_PLATFORM
from tuner.emulated.tools._sonic_db import sonic_target

SAVED = "/etc/sonic/config_db.json"


def main(argv: list[str]) -> int:
    t = sonic_target("sonic-cfggen")
    db = t.state["config_db"]
    if argv[:2] == ["-j", SAVED]:  # the saved file the switch boots from (``config save``)
        db = t.state.get("saved_config_db", db)
        argv = ["-d", *argv[2:]]
    if argv[:2] == ["-d", "-t"] and len(argv) > 2 and argv[3:4] in ([], ["-y"]):
        return render(t.state, argv[2])
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


def render(state: dict[str, Any], template: str) -> int:
    ours = f"/usr/share/sonic/device/{SONIC_PLATFORM}/{SONIC_HWSKU}/qos.json.j2"  # on its disk
    if template != ours or "qos_template" not in state:
        print("Traceback (most recent call last):\n  ...\njinja2.exceptions.TemplateNotFound: "
              f"{template.rsplit('/', 1)[-1]}", file=sys.stderr)
        return 1
    print(json.dumps(state["qos_template"], indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
