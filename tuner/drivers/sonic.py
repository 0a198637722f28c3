"""SONiC: ECN on the lossless queue's WRED profile with ``ecnconfig``; counters from ``show``.

Commands (sonic-utilities ``scripts/ecnconfig``; shared/reference/INDEX.md section 3.2):
``ecnconfig -l`` to read, ``ecnconfig -p <profile> -gmax|-gmin|-gdrop <n>`` to write (one field per
call, ordered by ``_ecn.ecn_write_order``), ``show pfc counters``, ``show queue counters``,
``show queue wredcounters`` and ``show pfcwd stats`` for counters. ``EcnSettings`` maps onto the
green fields: ``kmin_bytes`` = green_min_threshold, ``kmax_bytes`` = green_max_threshold,
``pmax_percent`` = green_drop_probability; ``enabled`` = the profile's ``ecn`` mode marks green.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from tuner.drivers._ecn import ecn_write_order
from tuner.drivers.base import Driver, Runner, WriteError
from tuner.errors import ApplyError
from tuner.settings import EcnSettings
from tuner.ssh.shell import q

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry

FLAGS = {"kmin_bytes": "-gmin", "kmax_bytes": "-gmax", "pmax_percent": "-gdrop"}
FIELDS = {"kmin_bytes": "green_min_threshold", "kmax_bytes": "green_max_threshold",
          "pmax_percent": "green_drop_probability"}
GREEN_MODES = {"ecn_green", "ecn_green_yellow", "ecn_green_red", "ecn_all"}
SECTIONS = ("pfc", "queue", "wred", "pfcwd")
SHOW = {"pfc": "show pfc counters", "queue": "show queue counters",
        "wred": "show queue wredcounters", "pfcwd": "show pfcwd stats"}


def _mark(section: str) -> str:
    return f"==ecntune:{section}=="


class SonicDriver(Driver[EcnSettings]):
    platform = "sonic"

    def __init__(self, runner: Runner, switch: SwitchEntry) -> None:
        super().__init__(runner, switch.name)
        self.switch = switch

    # -- commands (pure) ---------------------------------------------------------------
    def read_command(self) -> str:
        return "ecnconfig -l"

    def write_steps(self, current: EcnSettings, settings: EcnSettings) -> list[str]:
        """``ecnconfig`` calls in the min < max-safe order of ``ecn_write_order``.

        One call writes its fields one CONFIG_DB write at a time in a fixed order (gmax, gmin,
        ..., gdrop last; scripts/ecnconfig L372-388), so the thresholds get one call each (a
        single call would write gmax before gmin, wrong when lowering) and ``-gdrop`` rides
        on the last call, where ecnconfig writes it after the threshold anyway.
        """
        if settings.enabled != current.enabled:
            raise WriteError(f"{self.target}: switching ECN marking on/off is not done by this "
                             "driver (`ecnconfig -q` changes every port); set the profile's "
                             "ecn mode by hand", None)
        profile = q("wred_profile", self.switch.wred_profile)
        calls: list[list[str]] = []
        for name, value in ecn_write_order(current, settings):
            flag = f"{FLAGS[name]} {q('value', value)}"
            if name == "pmax_percent" and calls:
                calls[-1].append(flag)
            else:
                calls.append([flag])
        return [f"ecnconfig -p {profile} " + " ".join(call) for call in calls]

    def counters_command(self) -> str:
        """The counter commands as one line (``counters`` runs them as parallel channels)."""
        return " && ".join(f"echo {shlex.quote(_mark(s))} && {SHOW[s]}" for s in SECTIONS)

    def counters_commands(self) -> list[str]:
        return [SHOW[s] for s in SECTIONS]

    def commands(self) -> list[str]:
        lower = EcnSettings(kmin_bytes=100_000, kmax_bytes=400_000, pmax_percent=10)
        return [self.read_command(), self.write_command(EcnSettings(), lower),
                self.write_command(lower, EcnSettings()), self.counters_command()]

    # -- parsing (pure) ----------------------------------------------------------------
    def parse(self, text: str) -> EcnSettings:
        from objectives.parsers import parse_ecnconfig

        profiles: dict[str, dict[str, Any]] = parse_ecnconfig(text).profiles
        name = self.switch.wred_profile
        if name not in profiles:
            raise ApplyError(f"{self.target}: WRED profile {name!r} does not exist on the "
                             f"switch (has {sorted(profiles)}); refusing to create one")
        prof = profiles[name]
        try:
            return EcnSettings(
                kmin_bytes=int(prof[FIELDS["kmin_bytes"]]),
                kmax_bytes=int(prof[FIELDS["kmax_bytes"]]),
                pmax_percent=int(prof[FIELDS["pmax_percent"]]),
                enabled=str(prof.get("ecn", "ecn_none")) in GREEN_MODES)
        except KeyError as exc:
            raise ApplyError(f"{self.target}: profile {name} lacks {exc.args[0]}") from None
        except ValueError as exc:
            raise ApplyError(f"{self.target}: profile {name} holds invalid values: {exc}") \
                from None

    def counters_from(self, text: str) -> dict[str, dict[str, int]]:
        """Merge the four ``show`` tables into ``{"leaf0/Ethernet0": {...}}`` for our ports."""
        from objectives.parsers import (
            parse_pfcstat,
            parse_pfcwd_stats,
            parse_queue_counters,
            parse_wredcounters,
        )

        parts = _split(text)
        ports = [*self.switch.canary_ports, *self.switch.other_ports]
        out: dict[str, dict[str, int]] = {p: {} for p in ports}
        tables = (parse_pfcstat(parts["pfc"]).to_counters(),
                  parse_queue_counters(parts["queue"]).to_counters(),
                  parse_wredcounters(parts["wred"]).to_counters(),
                  parse_pfcwd_stats(parts["pfcwd"]).to_counters() if parts["pfcwd"].strip()
                  else {})
        for table in tables:
            for port, row in table.items():
                if port in out:
                    out[port].update(row)
        return {f"{self.target}/{port}": row for port, row in out.items()}

    # -- Driver ------------------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        """The four ``show`` commands at once, one SSH channel each (each is a slow Python
        start on a switch CPU), reassembled in ``counters_command`` form for parsing."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(SECTIONS)) as pool:
            outs = dict(zip(SECTIONS, pool.map(lambda sec: self.runner.run(SHOW[sec]).stdout,
                                               SECTIONS), strict=True))
        return self.counters_from("".join(f"{_mark(sec)}\n{outs[sec]}" for sec in SECTIONS))


def _split(text: str) -> dict[str, str]:
    parts = {s: "" for s in SECTIONS}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        hit = next((s for s in SECTIONS if stripped == _mark(s)), None)
        if hit:
            current = hit
        elif current:
            parts[current] += line
    return parts
