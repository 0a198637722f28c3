"""Static limits: what a proposal must satisfy before it may touch a device.

Pure functions on plain values, so the same rules run before any change on the simulated and the
real backend. The rules are the ones a field engineer checks by hand:

* every knob inside its hardware range (``tuner.settings.KNOBS``, from mstflint's mlxconfig DB);
* Kmin < Kmax;
* ECN before PFC: Kmax at least ``xoff_margin_percent`` below the PFC XOFF point of the queue,
  so that marking starts throttling senders before the switch pauses its upstream;
* no rate knob above the NIC's line rate.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tuner.settings import KNOBS

MAX_WINDOW_S = 5.0  # SONiC's longest PFC watchdog detection time (see storm_window_s)
RATE_KNOBS = ("rpg_max_rate", "rpg_ai_rate", "rpg_hai_rate", "rpg_min_rate",
              "rate_to_set_on_first_cnp")


class SafetyLimits(BaseModel):
    """The experiment file's ``safety:`` section. Every limit is finite and bounded: a limit
    that cannot be reached (``.inf``, ``1e21`` drops, a poll interval longer than any storm
    window) would switch the safety check off, so it is refused by name, with its bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    xoff_margin_percent: float = Field(default=20.0, ge=0, lt=100)
    # A PFC storm is sustained pausing: a port paused more than ``max_pause_fraction`` of a
    # whole ``storm_window_s`` (a sliding window; None = SONiC's PFC watchdog detection time,
    # 200 ms, scaled down to half the baseline measurement when that is shorter).
    # A start-up burst that clears within the window is not a storm (it is priced by the
    # score's PFC term instead). At most 5 s: the longest detection time SONiC's PFC watchdog
    # accepts (sonic-utilities pfcwd/main.py, ``detection-time`` IntRange(100, 5000) ms).
    max_pause_fraction: float = Field(default=0.5, gt=0, le=1)  # paused µs per µs, per port
    storm_window_s: float | None = Field(default=None, gt=0, le=MAX_WINDOW_S)
    # Per port and priority. At most 1e6/s: one pause frame of quanta 0xFFFF holds a 100G port
    # for 335 µs, so ~3000 frames/s keep it paused; a limit far above that never trips.
    max_pause_frames_per_s: float = Field(default=50_000, gt=0, le=1_000_000)
    max_lossless_drops: int = Field(default=0, ge=0, le=1_000_000)
    max_crc_errors: int = Field(default=0, ge=0, le=1_000_000)
    # Polled at least once per longest storm window, or the live monitor cannot see a storm.
    poll_interval_s: float = Field(default=1.0, gt=0, le=MAX_WINDOW_S)
    measurement_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    roce_priority: int = Field(default=3, ge=0, le=7)
    # Dead-man timer on every changed target (SSH backend): restores the baseline by itself
    # unless renewed within this time (0 = off). See safety/deadman.py.
    deadman_timeout_s: float = Field(default=60.0, ge=0, le=3600)
    # Cumulus NVUE: trial applies use NVUE's own commit-confirm (`nv config apply --confirm
    # <n>s`), which rolls back by itself this long after the apply unless confirmed -- it
    # outlives the tuner and is not renewed, so it must cover a whole trial (0 = off; 600 is
    # NVUE's default). See tuner/cluster/deadman.py.
    nvue_confirm_s: float = Field(default=600.0, ge=0, le=86400)


class Violation(BaseModel):
    """One broken rule. ``code`` becomes the verdict suffix (``rejected:kmin_ge_kmax``)."""

    model_config = ConfigDict(frozen=True)
    code: str
    target: str = ""
    detail: str = ""

    def __str__(self) -> str:
        where = f" on {self.target}" if self.target else ""
        return f"{self.code}{where}: {self.detail}" if self.detail else f"{self.code}{where}"


def describe(violations: list[Violation]) -> str:
    """One line for a list of violations: a code that hit several targets in full for its
    first target, then the names of the others, so a storm on 64 NICs stays readable (and
    within a tag's length); violations without a target in full."""
    parts: dict[str, list[Violation]] = {}
    for v in violations:
        parts.setdefault(v.code, []).append(v)
    out = []
    for first, *rest in parts.values():
        targets = [v.target for v in rest if v.target]
        out += [str(first) + (f" (also on {', '.join(targets)})" if targets else ""),
                *(str(v) for v in rest if not v.target)]
    return "; ".join(out)


def kmax_ceiling(xoff_bytes: int, limits: SafetyLimits) -> int:
    """The highest Kmax the ECN-before-PFC rule allows: XOFF less its margin."""
    return int(xoff_bytes * (1 - limits.xoff_margin_percent / 100))


def check_proposal(
    values: dict[str, int], *, xoff_bytes: int | None, line_rate_mbps: int, limits: SafetyLimits
) -> list[Violation]:
    """Every static rule a proposal breaks (empty list: safe to apply)."""
    out: list[Violation] = []
    for name, value in values.items():
        knob = KNOBS.get(name)
        if knob is None:
            out.append(Violation(code="unknown_knob", detail=name))
        elif not knob.lo <= value <= knob.hi:
            out.append(Violation(
                code="out_of_range",
                detail=f"{name}={value} outside the hardware range "
                       f"{knob.lo}..{knob.hi} {knob.unit}"))
    kmin, kmax = values.get("kmin_bytes"), values.get("kmax_bytes")
    if kmin is not None and kmax is not None and kmin >= kmax:
        out.append(Violation(code="kmin_ge_kmax",
                             detail=f"kmin_bytes={kmin} >= kmax_bytes={kmax}"))
    if kmax is not None and xoff_bytes is not None:
        ceiling = kmax_ceiling(xoff_bytes, limits)
        if kmax > ceiling:
            out.append(Violation(
                code="kmax_above_xoff",
                detail=f"kmax_bytes={kmax} above {ceiling} (PFC XOFF {xoff_bytes} B less a "
                       f"{limits.xoff_margin_percent:g} % margin): PFC would pause before ECN "
                       "acts"))
    for name in RATE_KNOBS:
        rate = values.get(name)
        if rate is not None and rate > line_rate_mbps:
            out.append(Violation(code="rate_above_line_rate",
                                 detail=f"{name}={rate} Mbit/s above line rate {line_rate_mbps}"))
    return out
