"""CONFIG_DB of an emulated SONiC switch (``state["config_db"]``: table -> key -> fields), as the
stand-ins ``sonic-db-cli``, ``sonic-cfggen``, ``mmuconfig`` and ``counterpoll`` see it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tuner.emulated import state as st
from tuner.emulated.tools._base import Target, target


def sonic_target(command: str) -> Target:
    t = target(command)
    if t.state.get("platform") != "sonic":
        print(f"bash: {command}: command not found", file=sys.stderr)
        sys.exit(127)
    return t


def update(t: Target, change: Callable[[dict[str, Any]], Any]) -> Any:
    """Read-modify-write CONFIG_DB under the target's lock; returns ``change``'s result."""
    with st.locked(t.dir):
        s = st.load_state(t.dir)
        out = change(s["config_db"])
        st.write_json(t.dir / "state.json", s)
    return out


def split_key(key: str) -> tuple[str, str]:
    table, sep, rest = key.partition("|")
    if not sep or not rest:
        raise ValueError(key)
    return table, rest
