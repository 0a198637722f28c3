"""Stand-in ``sonic-db-cli CONFIG_DB HSET|HGET|HGETALL|DEL|EXISTS <key> ...`` (redis commands on
CONFIG_DB, as sonic-db-cli passes them to redis; replies printed the way it prints them) and
``sonic-db-cli STATE_DB HGET|HGETALL|EXISTS <key> ...`` (read-only: what orchagent published,
``state["state_db"]``)."""

from __future__ import annotations

import sys
from typing import Any

from tuner.emulated.tools._sonic_db import sonic_target, split_key, update

USAGE = "usage: sonic-db-cli [-h] [-s] [-n NAMESPACE] db_or_op [cmd ...]"


def main(argv: list[str]) -> int:
    t = sonic_target("sonic-db-cli")
    if len(argv) < 3 or argv[0] not in ("CONFIG_DB", "STATE_DB"):
        print(USAGE if len(argv) < 3 else f"Invalid database name input : '{argv[0]}'",
              file=sys.stderr)
        return 1
    if argv[0] == "STATE_DB" and argv[1].upper() in ("HSET", "DEL"):
        print("this stand-in does not write STATE_DB (orchagent owns it)", file=sys.stderr)
        return 1
    op, key, args = argv[1].upper(), argv[2], argv[3:]
    try:
        table, rest = split_key(key)
    except ValueError:
        table, rest = key, ""

    def run(db: dict[str, Any]) -> str:
        row = db.get(table, {}).get(rest)
        if op == "HSET":
            if not args or len(args) % 2:
                raise ValueError("ERR wrong number of arguments for 'hset' command")
            entry = db.setdefault(table, {}).setdefault(rest, {})
            added = sum(1 for f in args[0::2] if f not in entry)
            entry.update(dict(zip(args[0::2], args[1::2], strict=True)))
            return str(added)
        if op == "HGET":
            if len(args) != 1:
                raise ValueError("ERR wrong number of arguments for 'hget' command")
            return str((row or {}).get(args[0], ""))
        if op == "HGETALL":
            return str(row or {})
        if op == "EXISTS":
            return "1" if row is not None else "0"
        if op == "DEL":
            if row is None:
                return "0"
            del db[table][rest]
            return "1"
        raise ValueError(f"ERR unknown command '{argv[1]}'")

    try:
        print(update(t, run) if op in ("HSET", "DEL")
              else run(t.state[argv[0].lower()] if argv[0] == "CONFIG_DB"
                       else t.state.get("state_db") or {}))
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
