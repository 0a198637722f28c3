"""Maintenance windows: a switch the inventory marks ``promote_in_maintenance`` takes a promotion
wave only while its operator has shifted it out of production.

What "in maintenance" means, as each platform reports it:

* SONiC: ``TSC`` (traffic-shift check, run after ``TSA``) prints ``System Mode: Maintenance``;
  ``Normal``, ``Not consistent`` and ``No external neighbors`` are the other states, and a
  multi-ASIC switch prints one line per BGP instance (``BGP0 : System Mode: ...``), all of
  which must say maintenance (sonic-mgmt tests/bgp/test_traffic_shift.py reads these lines).
* Cumulus Linux 5.13+: ``nv show maintenance`` lists units; the ``all-protocols`` row's state is
  ``maintenance`` (NVUE reference, Show Commands / System). 5.12 and earlier have no such
  command; their ``csmgrctl -s`` prints ``Current System Mode: Maintenance since ...``
  (Cumulus Linux user guide, Maintenance Mode).

Anything else, including output that says neither, is "not in maintenance": the check fails
closed, naming the switch and what it printed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.lifecycle.fleet import Fleet

SONIC_READ = "TSC"
NVUE_READ = "nv show maintenance 2>/dev/null || csmgrctl -s"

_SONIC = re.compile(r"^\s*(?:BGP\d+\s*:\s*)?System Mode:\s*(.+?)\s*$", re.M)
_CSMGR = re.compile(r"^\s*Current System Mode:\s*([A-Za-z]+)", re.M)
_UNIT = re.compile(r"^\s*all-protocols\s+(\S+)\s*$", re.M)


def mode(platform: str, text: str) -> str | None:
    """The switch's mode as it says it (``Maintenance``, ``Normal``, ``production`` ...), or
    None when the output carries no mode line."""
    if platform == "sonic":  # every ASIC's line; the first one not in maintenance wins
        modes = _SONIC.findall(text)
        return next((m for m in modes if m.lower() != "maintenance"), modes[0] if modes
                    else None)
    found = _UNIT.search(text) or _CSMGR.search(text)
    return found.group(1) if found else None


def read_command(platform: str) -> str:
    return SONIC_READ if platform == "sonic" else NVUE_READ


def refusals(fleet: Fleet, keys: list[str]) -> list[str]:
    """One line per switch among ``keys`` that must be in maintenance and is not (or could not
    be read); empty when the wave may go."""
    marked = [s for s in fleet.switches if s.name in keys and s.promote_in_maintenance]
    if not marked:
        return []
    platform = {s.name: s.platform for s in marked}
    res = fleet.fan(lambda d: d.runner.run(read_command(platform[d.target]), check=False,
                                           timeout_s=30), [s.name for s in marked])
    out = []
    for name, o in sorted(res.items()):
        cmd = read_command(platform[name])
        if o.error is not None or o.value is None:
            out.append(f"{name}: maintenance state unreadable ({cmd}): {o.error}")
            continue
        said = mode(platform[name], o.value.stdout)
        if (said or "").lower() != "maintenance":
            out.append(f"{name}: not in maintenance ({cmd}: "
                       f"{said if said else 'no mode line'}); the inventory marks it "
                       "promote_in_maintenance: shift it out of production first "
                       + ("(TSA)" if platform[name] == "sonic" else
                          "(nv set maintenance unit all-protocols mode enabled)"))
    return out
