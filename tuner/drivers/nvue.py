"""Cumulus Linux NVUE: ECN on the lossless traffic class of the ``default-global`` profile.

Commands (shared/reference/cumulus-nvue/, INDEX.md section 3.3):
``nv set qos congestion-control default-global traffic-class <tc> min-threshold|max-threshold
<bytes>``, ``... probability <0-100>``, ``... ecn enable|disable``, then ``nv config apply -y``;
read back with ``nv show qos congestion-control default-global traffic-class <tc>``; counters
from ``nv show interface <swp> counters qos`` (Cumulus Linux >= 5.5). Writes are staged and
applied at once, but are still issued in the min < max-safe order of ``_ecn.ecn_write_order``.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from tuner.drivers._ecn import ecn_write_order
from tuner.drivers.base import Driver, Runner
from tuner.errors import ApplyError
from tuner.settings import EcnSettings
from tuner.ssh.shell import q

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry

NV_NAMES = {"kmin_bytes": "min-threshold", "kmax_bytes": "max-threshold",
            "pmax_percent": "probability"}


def _mark(port: str) -> str:
    return f"==ecntune:port:{port}=="


class NvueDriver(Driver[EcnSettings]):
    platform = "nvue"

    def __init__(self, runner: Runner, switch: SwitchEntry) -> None:
        super().__init__(runner, switch.name)
        self.switch = switch

    @property
    def _prefix(self) -> str:
        return ("qos congestion-control default-global traffic-class "
                f"{q('value', int(self.switch.lossless_queue))}")

    # -- commands (pure) ---------------------------------------------------------------
    def read_command(self) -> str:
        return f"nv show {self._prefix}"

    def write_steps(self, current: EcnSettings, settings: EcnSettings) -> list[str]:
        """Staged ``nv set`` in the min < max-safe order, then one ``nv config apply``."""
        steps = [f"nv set {self._prefix} {NV_NAMES[name]} {q('value', value)}"
                 for name, value in ecn_write_order(current, settings)]
        if settings.enabled != current.enabled:
            steps.append(f"nv set {self._prefix} ecn "
                         f"{'enable' if settings.enabled else 'disable'}")
        # apply prints "applied [rev_id: N]": keep it out of the read-back on stdout
        return [*steps, "nv config apply -y >&2"] if steps else []

    def counters_command(self) -> str:
        ports = [*self.switch.canary_ports, *self.switch.other_ports]
        return " && ".join(f"echo {shlex.quote(_mark(p))} && nv show interface "
                           f"{q('switch_port', p)} counters qos" for p in ports)

    def commands(self) -> list[str]:
        lower = EcnSettings(kmin_bytes=100_000, kmax_bytes=400_000, pmax_percent=10)
        return [self.read_command(), self.write_command(EcnSettings(), lower),
                self.counters_command()]

    # -- parsing (pure) ----------------------------------------------------------------
    def parse(self, text: str) -> EcnSettings:
        """Read-back of one traffic class (key/value view, text or ``-o json``)."""
        from objectives.parsers import parse_nvue

        show = parse_nvue(text)
        tc = self.switch.lossless_queue
        prof = show.ecn_profiles().get(tc)  # whole-profile views
        if prof is None:
            prof = {"ecn": _enabled(show.values.get("ecn")),
                    "min_threshold_bytes": _int(show.values.get("min-threshold")),
                    "max_threshold_bytes": _int(show.values.get("max-threshold")),
                    "probability": _int(show.values.get("probability"))}
        missing = sorted(k for k, v in prof.items() if v is None)
        if missing:
            raise ApplyError(f"{self.target}: `{self.read_command()}` shows no {missing}")
        try:
            return EcnSettings(kmin_bytes=int(prof["min_threshold_bytes"]),  # type: ignore[arg-type]
                               kmax_bytes=int(prof["max_threshold_bytes"]),  # type: ignore[arg-type]
                               pmax_percent=int(prof["probability"]),  # type: ignore[arg-type]
                               enabled=bool(prof["ecn"]))
        except ValueError as exc:
            raise ApplyError(f"{self.target}: invalid ECN values on traffic-class {tc}: "
                             f"{exc}") from None

    def counters_from(self, text: str) -> dict[str, dict[str, int]]:
        """One ``nv show interface <swp> counters qos`` per port, between markers."""
        from objectives.parsers import parse_nvue

        chunks: dict[str, list[str]] = {}
        port: str | None = None
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("==ecntune:port:") and stripped.endswith("=="):
                port = stripped[len("==ecntune:port:"):-2]
                chunks[port] = []
            elif port is not None:
                chunks[port].append(line)
        out: dict[str, dict[str, int]] = {}
        for port, lines in chunks.items():
            out[f"{self.target}/{port}"] = parse_nvue("\n".join(lines) + "\n").to_counters()
        return out

    # -- Driver ------------------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        return self.counters_from(self.runner.run(self.counters_command()).stdout)


def _int(v: Any) -> int | None:
    return None if v is None else v.as_int()


def _enabled(v: Any) -> bool | None:
    if v is None or v.value is None:
        return None
    return str(v.value).lower() in ("enable", "enabled", "on", "true", "yes")
