"""Congestion-control settings as data: switch ECN per queue and NIC DCQCN per port.

Knob names are the real device names (MLNX_OFED sysfs ``ecn/roce_rp`` and ``ecn/roce_np``
files; SONiC WRED profile fields map onto ``kmin_bytes``/``kmax_bytes``/``pmax_percent``), so an
operator recognises them. Units, hardware ranges and factory defaults come from
``shared/reference/INDEX.md`` section 2 (mstflint ``mlxconfig_host.db`` and a ConnectX-4 Lx
``mstconfig query``). This module is a dependency-free leaf: ``safety`` and ``objectives`` may
import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Device = Literal["switch", "nic"]


@dataclass(frozen=True)
class Knob:
    """One tunable parameter: its real name, unit, hardware range and factory default."""

    name: str
    device: Device
    unit: str
    lo: int
    hi: int
    default: int
    meaning: str


# Ranges are the firmware field widths without the 32-bit-rate capability (the safe subset).
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        # Switch ECN/WRED on the lossless queue (SONiC WRED_PROFILE green_*, NVUE thresholds).
        Knob("kmin_bytes", "switch", "bytes", 1_000, 16_000_000, 1_048_576,
             "ECN marking starts above this egress-queue depth (green_min_threshold)"),
        Knob("kmax_bytes", "switch", "bytes", 2_000, 32_000_000, 2_097_152,
             "marking probability reaches pmax here, 100 % above (green_max_threshold)"),
        Knob("pmax_percent", "switch", "%", 0, 100, 5,
             "marking probability at kmax (green_drop_probability)"),
        # NIC reaction point (roce_rp/).
        Knob("clamp_tgt_rate", "nic", "bool", 0, 1, 0, "on CNP, target rate := current rate"),
        Knob("clamp_tgt_rate_after_time_inc", "nic", "bool", 0, 1, 1,
             "clamp target rate on CNP also after a timer-driven increase"),
        Knob("rpg_time_reset", "nic", "us", 1, 131_071, 300,
             "time between rate increases without CNP"),
        Knob("rpg_byte_reset", "nic", "bytes", 0, 32_767, 32_767,
             "bytes sent between rate increases without CNP (0 = disabled)"),
        Knob("rpg_threshold", "nic", "count", 1, 31, 1,
             "byte/time stages before the RP advances to additive/hyper increase"),
        # 800 Gb/s ports (ConnectX-8): RPG_MAX_RATE is a plain Mbit/s field (mstflint's
        # mlxconfig DB, nv_roce_cc_ecn); the rate checks bound it by each host's nic_gbps.
        Knob("rpg_max_rate", "nic", "Mbit/s", 0, 800_000, 0, "rate cap (0 = port speed)"),
        Knob("rpg_ai_rate", "nic", "Mbit/s", 1, 131_071, 5, "additive-increase step"),
        Knob("rpg_hai_rate", "nic", "Mbit/s", 1, 131_071, 50, "hyper-increase step"),
        Knob("rpg_gd", "nic", "log2", 0, 15, 11, "rate cut is RC * (1 - alpha / 2^rpg_gd)"),
        Knob("rpg_min_dec_fac", "nic", "%", 1, 100, 50, "one cut keeps at least this share"),
        Knob("rpg_min_rate", "nic", "Mbit/s", 1, 131_071, 1, "floor of the limited rate"),
        Knob("rate_to_set_on_first_cnp", "nic", "Mbit/s", 0, 131_071, 0,
             "rate on the first CNP (0 = keep port speed)"),
        # mstflint's text (shared/reference INDEX.md): the gain of alpha per dce_tcp_rtt,
        # g = value/1024. NVIDIA's community page reads it as the share kept, 1 - g; the twin
        # takes either (fabric.topology.dce_tcp_g_reading, "vendor" until hardware settles it).
        Knob("dce_tcp_g", "nic", "1/1024", 1, 1023, 1019,
             "alpha gain per dce_tcp_rtt: alpha <- cnp * value/1024 + (1 - value/1024) * alpha"),
        Knob("dce_tcp_rtt", "nic", "us", 1, 131_071, 1, "alpha update period"),
        Knob("rate_reduce_monitor_period", "nic", "us", 1, 131_071, 4,
             "minimum time between two rate cuts of a flow"),
        Knob("initial_alpha_value", "nic", "1/1024", 0, 1023, 1023, "alpha at the first CNP"),
        # NIC notification point (roce_np/). Factory value 0 per the ConnectX-4 Lx query.
        Knob("min_time_between_cnps", "nic", "us", 0, 131_071, 0,
             "minimum gap between CNPs per flow (0 = one per marked packet)"),
    )
}

SWITCH_KNOBS = tuple(n for n, k in KNOBS.items() if k.device == "switch")
NIC_KNOBS = tuple(n for n, k in KNOBS.items() if k.device == "nic")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _ranged(name: str) -> int:
    k = KNOBS[name]
    return Field(default=k.default, ge=k.lo, le=k.hi, description=f"{k.meaning} [{k.unit}]")


class EcnSettings(BaseModel):
    """ECN (RED-like marking) on one switch's lossless queue."""

    model_config = _FROZEN
    kmin_bytes: int = _ranged("kmin_bytes")
    kmax_bytes: int = _ranged("kmax_bytes")
    pmax_percent: int = _ranged("pmax_percent")
    enabled: bool = True

    @model_validator(mode="after")
    def _kmin_below_kmax(self) -> EcnSettings:
        if self.kmin_bytes >= self.kmax_bytes:
            raise ValueError(
                f"kmin_bytes ({self.kmin_bytes}) must be below kmax_bytes ({self.kmax_bytes})")
        return self


class DcqcnSettings(BaseModel):
    """DCQCN on one NIC port (reaction point and notification point), ConnectX semantics."""

    model_config = _FROZEN
    clamp_tgt_rate: int = _ranged("clamp_tgt_rate")
    clamp_tgt_rate_after_time_inc: int = _ranged("clamp_tgt_rate_after_time_inc")
    rpg_time_reset: int = _ranged("rpg_time_reset")
    rpg_byte_reset: int = _ranged("rpg_byte_reset")
    rpg_threshold: int = _ranged("rpg_threshold")
    rpg_max_rate: int = _ranged("rpg_max_rate")
    rpg_ai_rate: int = _ranged("rpg_ai_rate")
    rpg_hai_rate: int = _ranged("rpg_hai_rate")
    rpg_gd: int = _ranged("rpg_gd")
    rpg_min_dec_fac: int = _ranged("rpg_min_dec_fac")
    rpg_min_rate: int = _ranged("rpg_min_rate")
    rate_to_set_on_first_cnp: int = _ranged("rate_to_set_on_first_cnp")
    dce_tcp_g: int = _ranged("dce_tcp_g")
    dce_tcp_rtt: int = _ranged("dce_tcp_rtt")
    rate_reduce_monitor_period: int = _ranged("rate_reduce_monitor_period")
    initial_alpha_value: int = _ranged("initial_alpha_value")
    min_time_between_cnps: int = _ranged("min_time_between_cnps")


class Settings(BaseModel):
    """What one trial sets on the canary: ECN per switch, DCQCN per NIC.

    Keys are target names from the cluster description (``leaf0``; ``host3/mlx5_0``).
    """

    model_config = _FROZEN
    switches: dict[str, EcnSettings] = Field(default_factory=dict)
    nics: dict[str, DcqcnSettings] = Field(default_factory=dict)

    def targets(self) -> list[str]:
        return sorted(self.switches) + sorted(self.nics)

    def flat(self) -> dict[str, int]:
        """The distinct knob values (the canary is set uniformly); for params and reports."""
        out: dict[str, int] = {}
        for part in (*self.switches.values(), *self.nics.values()):
            for name, value in part.model_dump(exclude={"enabled"}).items():
                out.setdefault(name, int(value))
        return out

    def diff(self, other: Settings) -> dict[str, tuple[object, object]]:
        """``{"target.knob": (self_value, other_value)}`` for every value that differs."""
        changes: dict[str, tuple[object, object]] = {}
        for kind in ("switches", "nics"):
            mine, theirs = getattr(self, kind), getattr(other, kind)
            for target in sorted(set(mine) | set(theirs)):
                a = mine[target].model_dump() if target in mine else {}
                b = theirs[target].model_dump() if target in theirs else {}
                for knob in sorted(set(a) | set(b)):
                    if a.get(knob) != b.get(knob):
                        changes[f"{target}.{knob}"] = (a.get(knob), b.get(knob))
        return changes

    @classmethod
    def uniform(cls, switches: list[str], nics: list[str], values: dict[str, int]) -> Settings:
        """The same knob values on every listed switch and NIC (unknown names raise)."""
        unknown = set(values) - set(KNOBS)
        if unknown:
            raise ValueError(f"unknown knobs: {sorted(unknown)}")
        ecn = EcnSettings.model_validate({k: v for k, v in values.items() if k in SWITCH_KNOBS})
        dcqcn = DcqcnSettings.model_validate({k: v for k, v in values.items() if k in NIC_KNOBS})
        return cls(switches={s: ecn for s in switches}, nics={n: dcqcn for n in nics})
