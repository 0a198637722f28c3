"""Contradictions between fields of a valid-looking experiment, and inventory inputs that only
the local machine can check (key files, known_hosts, secrets written into a file).

The pydantic models catch wrong types, unknown keys and out-of-range values field by field; this
module catches what needs two fields or the file system, before any backend is built, so the
CLI can answer with exit code 2 and a line naming the file, the field and the fix. Reachability
is checked later, by pre-flight (``tuner.cli.preflight.gate``), which maps a connection failure
to the inventory entry's ``address``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import ConfigError
from tuner.settings import KNOBS

if TYPE_CHECKING:
    from tuner.experiment import Experiment
    from tuner.inventory import Inventory

RATE_KNOBS = ("rpg_max_rate", "rpg_ai_rate", "rpg_hai_rate", "rpg_min_rate",
              "rate_to_set_on_first_cnp")


def _knob_problems(exp: Experiment) -> list[str]:
    out = []
    pinned = {**exp.current, **exp.search.fixed}
    searched = exp.search.knobs
    kmin, kmax = pinned.get("kmin_bytes"), pinned.get("kmax_bytes")
    if "kmin_bytes" not in searched:
        kmin_v = kmin if kmin is not None else KNOBS["kmin_bytes"].default
        kmax_v = kmax if kmax is not None else KNOBS["kmax_bytes"].default
        if kmin_v >= kmax_v:
            field = "search.fixed.kmin_bytes" if "kmin_bytes" in exp.search.fixed else (
                "current.kmin_bytes" if kmin is not None else "search.fixed.kmax_bytes")
            out.append(f"{field}: kmin_bytes {kmin_v} >= kmax_bytes {kmax_v} (Kmin must be "
                       "below Kmax) -- lower kmin_bytes or raise kmax_bytes")
    elif kmax is not None:
        low = searched["kmin_bytes"].low or KNOBS["kmin_bytes"].lo
        if low >= kmax:
            out.append(f"search.knobs.kmin_bytes.low: {low:g} >= the pinned kmax_bytes {kmax} "
                       "-- search kmax_ratio instead of pinning kmax_bytes, or lower the range")
    inv_file = exp.fabric.inventory_file
    if exp.fabric.backend == "ssh" and inv_file is not None:
        path = Path(os.path.expandvars(os.path.expanduser(inv_file)))
        if "$" not in str(path) and not path.is_file():
            out.append(f"fabric.inventory_file: {inv_file} does not exist -- fix the path "
                       f"(relative paths start from {Path.cwd()})")
    if exp.fabric.backend == "sim":
        line = int(exp.fabric.topology.nic_gbps * 1000)
        for name in RATE_KNOBS:
            value = pinned.get(name)
            if value is not None and value > line:
                where = "search.fixed" if name in exp.search.fixed else "current"
                out.append(f"{where}.{name}: {value} Mbit/s above the NIC line rate {line} "
                           f"Mbit/s -- use at most {line} (0 = port speed for rpg_max_rate)")
            rng = searched.get(name)
            if rng is not None and rng.low is not None and rng.low > line:
                out.append(f"search.knobs.{name}.low: {rng.low:g} Mbit/s above the NIC line "
                           f"rate {line} Mbit/s -- lower the range")
    return out


def inventory_problems(inv: Inventory, source: str) -> list[str]:
    """Secrets written into the file, key files and known_hosts that cannot be read."""
    out = []
    for i, t in enumerate((*inv.hosts, *inv.switches)):
        kind = "hosts" if i < len(inv.hosts) else "switches"
        idx = i if i < len(inv.hosts) else i - len(inv.hosts)
        where = f"{kind}[{idx}] ({t.name})"
        for secret in ("password", "key_passphrase"):
            if getattr(t, secret) is not None:
                out.append(f"{source}: {where}.{secret}: secrets are never read from files -- "
                           "remove it and use the SSH agent or a key file (key_file)")
        if t.key_file is not None:
            path = Path(os.path.expanduser(t.key_file))
            if not path.is_file():
                out.append(f"{source}: {where}.key_file: {t.key_file} does not exist -- fix "
                           "the path, or drop key_file to use the SSH agent")
            elif not os.access(path, os.R_OK):
                out.append(f"{source}: {where}.key_file: {t.key_file} is not readable -- fix "
                           "its permissions (chmod 600, owned by you)")
    kh = Path(os.path.expanduser(inv.ssh.known_hosts))
    if not inv.ssh.trust_on_first_use and not kh.exists():
        out.append(f"{source}: ssh.known_hosts: {inv.ssh.known_hosts} does not exist -- add "
                   "the hosts' keys with ssh-keyscan, or set ssh.trust_on_first_use: true")
    return out


def inventory_source(exp: Experiment, source: str) -> str:
    f = exp.fabric.inventory_file
    return os.path.expandvars(os.path.expanduser(f)) if f else f"{source}: fabric.inventory"


def check_inputs(exp: Experiment, source: str, inventory: Any = None) -> None:
    """Raise ``ConfigError`` listing every contradiction (one line each) or do nothing."""
    lines = [f"{source}: {p}" for p in _knob_problems(exp)]
    if inventory is not None:
        lines += inventory_problems(inventory, inventory_source(exp, source))
    if lines:
        raise ConfigError("\n".join(lines))


def with_source(exc: ConfigError, source: str) -> ConfigError:
    """Prefix a backend's ``ConfigError`` with the file it came from (when it lacks one)."""
    text = str(exc)
    return exc if text.startswith(source) else ConfigError(f"{source}: {text}")
