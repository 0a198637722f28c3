"""Building remote command lines safely: strict value patterns, quoting and the timeout wrapper.

Pure functions, no paramiko: every value that reaches a remote shell is checked against a strict
pattern here and passed through ``shlex.quote``, so a hostile or mistyped inventory value can
never become shell syntax.
"""

from __future__ import annotations

import re
import shlex

# Strict patterns for names that end up in command lines (checked again at use, not only at load).
PATTERNS: dict[str, re.Pattern[str]] = {
    "netdev": re.compile(r"^[A-Za-z0-9_.:-]{1,15}$"),  # IFNAMSIZ - 1
    "rdma_device": re.compile(r"^[A-Za-z0-9_.-]{1,64}$"),
    "pci": re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"),
    "path": re.compile(r"^/[A-Za-z0-9_.+@:/-]*$"),
    "switch_port": re.compile(r"^[A-Za-z][A-Za-z0-9_./:-]{0,31}$"),
    "wred_profile": re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9_]{0,31}$"),  # SONiC YANG pattern
    "env_name": re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$"),
    "env_value": re.compile(r"^[A-Za-z0-9_.,:/=+@^-]{0,256}$"),
    "host": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}$"),
    "user": re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$"),
    "binary": re.compile(r"^[A-Za-z0-9_./+-]{1,255}$"),
    # SONiC CONFIG_DB keys (``QUEUE|Ethernet0|3``), field names and field values
    "db_key": re.compile(r"^[A-Z_]{1,32}\|[A-Za-z0-9_.:/|-]{1,96}$"),
    "db_field": re.compile(r"^[a-z][a-z0-9_]{0,63}$"),
    "db_value": re.compile(r"^[A-Za-z0-9_.-]{1,64}$"),
}


class UnsafeValue(ValueError):
    """A value does not fit the strict pattern of its kind."""


def check(kind: str, value: str) -> str:
    """Return ``value`` unchanged if it fits the pattern for ``kind``; raise otherwise."""
    pattern = PATTERNS[kind]
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value.split("/"):
        raise UnsafeValue(f"{kind} {value!r} does not match {pattern.pattern}")
    return value


def q(kind: str, value: str | int) -> str:
    """Check then quote one value; integers are formatted as plain decimals."""
    if isinstance(value, bool):
        raise UnsafeValue(f"{kind}: booleans are not command values")
    if isinstance(value, int):
        return str(int(value))
    return shlex.quote(check(kind, value))


def wrap(command: str, timeout_s: float, *, sudo: bool = False, pid: bool = False) -> str:
    """Wrap ``command`` so it dies on the remote side too when its time is up.

    ``timeout --kill-after=5 T bash -c CMD`` (GNU coreutils) sends TERM at T seconds and KILL five
    seconds later to the whole process group; with ``sudo`` it runs as ``sudo -n`` (never
    prompts). With ``pid`` the line first prints ``$$`` (the PID that ``exec`` hands to
    sudo/timeout), so the caller can stop it with ``kill -TERM <pid>``.
    """
    seconds = max(1, int(round(timeout_s)))
    inner = f"timeout --kill-after=5 {seconds} bash -c {shlex.quote(command)}"
    if sudo:
        inner = f"sudo -n {inner}"
    if pid:
        return f"echo $$; exec {inner}"
    return inner
