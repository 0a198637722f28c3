"""Stand-in SONiC ``config save [-y]`` (sonic-utilities config/main.py ``save``): the running
CONFIG_DB becomes the saved ``/etc/sonic/config_db.json`` the switch boots from. The saved copy
lives in the target's state (``saved_config_db``), so a cluster reset restores the factory file.
Only ``save`` is emulated; other ``config`` sub-commands fail like an unknown command.
"""

from __future__ import annotations

import json
import sys

from tuner.emulated import state as st
from tuner.emulated.tools._base import target


def main(argv: list[str]) -> int:
    t = target("config")
    if t.state.get("platform") != "sonic":
        print("bash: config: command not found", file=sys.stderr)
        return 127
    words = [a for a in argv if a not in ("-y", "--yes")]
    if words[:1] != ["save"] or len(words) > 1:
        print(f"Error: No such command \"{' '.join(words[:1])}\".", file=sys.stderr)
        return 2
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        s["saved_config_db"] = json.loads(json.dumps(s["config_db"]))
        st.write_json(t.dir / "state.json", s)
    print("Running command: /usr/local/bin/sonic-cfggen -d --print-data > "
          "/etc/sonic/config_db.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
