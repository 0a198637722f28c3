"""Stand-in SONiC ``ecnconfig`` (sonic-utilities scripts/ecnconfig @691b1bbc4 / 0ed3461e).

Same options, validation messages and write behaviour: values are merged with the stored profile
and validated together, then written one CONFIG_DB field at a time in the order gmax, gmin, ymax,
ymin, rmax, rmin, gdrop, ydrop, rdrop (fault ``ecnconfig_fail_after`` makes a write fail part-way,
leaving the earlier fields applied, which is what a real mid-command failure leaves behind).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tuner.emulated import state as st
from tuner.emulated.switches import WRED_FIELD_ORDER
from tuner.emulated.tools._base import target

WRED_CONFIG_FIELDS = {
    "gmax": "green_max_threshold", "gmin": "green_min_threshold",
    "ymax": "yellow_max_threshold", "ymin": "yellow_min_threshold",
    "rmax": "red_max_threshold", "rmin": "red_min_threshold",
    "gdrop": "green_drop_probability", "ydrop": "yellow_drop_probability",
    "rdrop": "red_drop_probability",
}
_LONG = {"--green-min": "gmin", "--green-max": "gmax", "--yellow-min": "ymin",
         "--yellow-max": "ymax", "--red-min": "rmin", "--red-max": "rmax",
         "--green-drop-prob": "gdrop", "--yellow-drop-prob": "ydrop", "--red-drop-prob": "rdrop"}
USAGE = ("Usage: ecnconfig [OPTIONS] [[on|off]]\n"
         "Try 'ecnconfig --help' for help.\n")


class _Fail(Exception):
    pass


def _tabulate(rows: list[tuple[str, str]]) -> str:
    """tabulate(rows) default 'simple' without headers: numbers right-aligned per column."""
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    numeric = all(r[1].lstrip("-").isdigit() for r in rows)
    lines = ["-" * w0 + "  " + "-" * w1]
    for k, v in rows:
        lines.append(f"{k:<{w0}}  {v:>{w1}}" if numeric else f"{k:<{w0}}  {v:<{w1}}".rstrip())
    lines.append(lines[0])
    return "\n".join(lines)


def _parse(argv: list[str]) -> dict[str, Any]:
    sets: dict[str, str] = {}
    opts: dict[str, Any] = {"set": sets, "list": False, "verbose": False, "profile": None,
                            "queue": None, "command": None}
    it = iter(argv)
    for a in it:
        key = a.lstrip("-") if a.startswith("-") else None
        if a in ("-l", "--list"):
            opts["list"] = True
        elif a in ("-vv", "--verbose"):
            opts["verbose"] = True
        elif a in ("-p", "--profile", "-q", "--queue", "-n", "--namespace") or (
                key in WRED_CONFIG_FIELDS) or a in _LONG:
            try:
                value = next(it)
            except StopIteration:
                raise _Fail(f"{USAGE}\nError: Option '{a}' requires an argument.") from None
            if a in ("-p", "--profile"):
                opts["profile"] = value
            elif a in ("-q", "--queue"):
                opts["queue"] = value
            elif a in ("-n", "--namespace"):
                raise _Fail(f"{USAGE}\nError: Invalid value for '-n' / '--namespace': "
                            f"'{value}' is not one of .")
            else:
                name = _LONG.get(a, key or "")
                if name.endswith("drop") and not (value.isdigit() and int(value) <= 100):
                    # click.IntRange(0, 100) (sonic-utilities test vector ecn_cfg_rdrop_invalid)
                    raise _Fail(f"{USAGE}\nError: Invalid value for '{a}': {value} is not in "
                                "the range 0<=x<=100.")
                sets[name] = value
        elif a.lower() in ("on", "off"):
            opts["command"] = a.lower()
        else:
            raise _Fail(f"{USAGE}\nError: No such option: {a}")
    return opts


def _validate(data: dict[str, str]) -> bool:
    result = True
    for key, field in WRED_CONFIG_FIELDS.items():
        if field in data:
            value = data[field]
            if "threshold" in field and not value.isdigit():
                print(f"Invalid {key} ({value}). {key} should be an non-negative integer")
                result = False
            elif "probability" in field and (not value.isdigit() or not 0 <= int(value) <= 100):
                print(f"Invalid {key} ({value}). {key} should be an integer between 0 and 100.")
                result = False
    if not result:
        return result
    for c in "gyr":
        lo, hi = WRED_CONFIG_FIELDS[c + "min"], WRED_CONFIG_FIELDS[c + "max"]
        if lo in data and hi in data and int(data[lo]) > int(data[hi]):
            print(f"Invalid {c}min ({int(data[lo])}) and {c}max ({int(data[hi])}). "
                  f"{c}min should be smaller than {c}max")
            result = False
    return result


def _set_profile(tdir: Path, profile: str, values: dict[str, str], verbose: bool,
                 fail_after: int | None) -> None:
    with st.locked(tdir):
        state = st.load_state(tdir)
        profiles = state["config_db"]["WRED_PROFILE"]
        if profile not in profiles:
            raise _Fail(f"Input arguments error. Invalid WRED profile {profile} "
                        "for namespace None")
        merged = dict(profiles[profile])
        for key, value in values.items():
            merged[WRED_CONFIG_FIELDS[key]] = value
        if not _validate(merged):
            raise _Fail("Input arguments error. Invalid WRED profile parameters")
        writes = 0
        for key in WRED_CONFIG_FIELDS:  # dict order == ecnconfig's write order
            if key not in values:
                continue
            if fail_after is not None and writes >= fail_after:
                st.write_json(tdir / "state.json", state)
                raise _Fail("Unable to connect to redis (unix-socket) - "
                            "Connection refused")
            field, value = WRED_CONFIG_FIELDS[key], values[key]
            if verbose:
                pct = "%" if "probability" in field else ""
                print(f"Setting {field} value to {value}{pct}")
            profiles[profile][field] = value
            writes += 1
        st.write_json(tdir / "state.json", state)


def _list(state: dict[str, Any], verbose: bool) -> None:
    profiles = state["config_db"]["WRED_PROFILE"]
    for name, data in profiles.items():
        print("Profile: " + name)
        order = [f for f in WRED_FIELD_ORDER if f in data] + [
            f for f in data if f not in WRED_FIELD_ORDER]
        print(_tabulate([(f, str(data[f])) for f in order]) + "\n")
    if verbose:
        print(f"Total profiles: {len(profiles)}")


def _queue(tdir: Path, state: dict[str, Any], queues: str, command: str | None,
           verbose: bool) -> None:
    db = state["config_db"]
    ports = sorted(db["DEVICE_NEIGHBOR"], key=lambda k: int(k[8:]))
    qlist = queues.split(",")
    if command is None:
        print("ECN status:")
        for q in qlist:
            out = f"queue {q}"
            if verbose:
                out = f"{','.join(ports)} {out}"
            val = db["QUEUE"].get(f"{ports[0]}|{q}", {}).get("wred_profile")
            print(f"{out}: {'on' if val == 'AZURE_LOSSLESS' else 'off'}")
        return
    with st.locked(tdir):
        state = st.load_state(tdir)
        qtab = state["config_db"]["QUEUE"]
        for q in qlist:
            if verbose:
                print(f"{'Enable' if command == 'on' else 'Disable'} ECN on "
                      f"{','.join(ports)} queue {q}")
            for port in ports:
                entry = qtab.setdefault(f"{port}|{q}", {})
                if command == "on":
                    entry["wred_profile"] = "AZURE_LOSSLESS"
                else:
                    entry.pop("wred_profile", None)
                if not entry:
                    del qtab[f"{port}|{q}"]
        st.write_json(tdir / "state.json", state)


def main(argv: list[str]) -> int:
    t = target("ecnconfig")
    if t.state.get("platform") != "sonic":
        print("bash: ecnconfig: command not found", file=sys.stderr)
        return 127
    try:
        o = _parse(argv)
        values: dict[str, str] = o["set"]
        if o["list"] or o["profile"]:
            if o["list"]:
                if values:
                    raise _Fail("Input arguments error. No set options allowed when -l[ist] "
                                "specified")
                _list(t.state, bool(o["verbose"]))
            else:
                if not values:
                    raise _Fail("Input arguments error. Specify at least one threshold "
                                "parameter to set")
                fail_after = t.faults.get("ecnconfig_fail_after")
                _set_profile(t.dir, str(o["profile"]), values, bool(o["verbose"]),
                             None if fail_after is None else int(fail_after))
        elif o["queue"] is not None:
            if str(o["queue"]).split(",") == [""]:
                raise _Fail("Input arguments error. Specify at least one queue by index")
            _queue(t.dir, t.state, str(o["queue"]), o["command"], bool(o["verbose"]))
        else:
            return 1
    except _Fail as e:
        msg = str(e)
        if msg.startswith("Usage:"):
            print(msg, file=sys.stderr)
            return 2
        print("Exception caught: ", msg, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
