"""Static limits: what a proposal must satisfy before it may touch a device.

Pure functions on plain values, so the same rules run before any change on the simulated and the
real backend. The rules are the ones a field engineer checks by hand:

* every knob inside its hardware range (``tuner.settings.KNOBS``, from mstflint's mlxconfig DB);
* Kmin < Kmax;
* ECN before PFC: Kmax at least ``xoff_margin_percent`` below the egress queue depth at which
  the ingress priority groups feeding that queue cross their PFC dynamic threshold
  (``PfcThreshold``), so that marking throttles senders before the switch pauses upstream;
* no rate knob above the NIC's line rate.
"""

from __future__ import annotations

import json
import math

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tuner.settings import KNOBS

MAX_WINDOW_S = 5.0  # SONiC's longest PFC watchdog detection time (see storm_window_s)
RATE_KNOBS = ("rpg_max_rate", "rpg_ai_rate", "rpg_hai_rate", "rpg_min_rate",
              "rate_to_set_on_first_cnp")


# Upper bounds that are judgment, not physics: beyond them a limit stops protecting anything
# in practice, so they are refused unless the operator says ``ecntune --i-know`` (validation
# context ``i_know``), which prints each one and logs it to MLflow (``beyond_bounds``).
# Finiteness and the physical bounds (a fraction at most 1, a priority 0..7) never give way.
SOFT_BOUNDS: dict[str, float] = {
    "storm_window_s": MAX_WINDOW_S, "max_pause_frames_per_s": 1_000_000,
    "max_lossless_drops": 1_000_000, "max_crc_errors": 1_000_000,
    "poll_interval_s": MAX_WINDOW_S, "measurement_timeout_s": 86_400,
    "deadman_timeout_s": 3600, "nvue_confirm_s": 86_400,
}


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:g}"


class SafetyLimits(BaseModel):
    """The experiment file's ``safety:`` section. Every limit is finite and bounded: a limit
    that cannot be reached (``.inf``, ``1e21`` drops, a poll interval longer than any storm
    window) would switch the safety check off, so it is refused by name, with its bound.
    ``ecntune --i-know`` lifts the ``SOFT_BOUNDS`` (never finiteness)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # Kmax stays this far below the queue depth at which PFC XOFF fires (PfcThreshold): room
    # for other traffic in the shared pool, which lowers the free buffer the threshold scales.
    xoff_margin_percent: float = Field(default=20.0, ge=0, lt=100)
    # A PFC storm is sustained pausing: a port paused more than ``max_pause_fraction`` of a
    # whole ``storm_window_s`` (a sliding window; None = SONiC's PFC watchdog detection time,
    # 200 ms, scaled down to half the baseline measurement when that is shorter).
    # A start-up burst that clears within the window is not a storm (it is priced by the
    # score's PFC term instead). At most 5 s: the longest detection time SONiC's PFC watchdog
    # accepts (sonic-utilities pfcwd/main.py, ``detection-time`` IntRange(100, 5000) ms).
    max_pause_fraction: float = Field(default=0.5, gt=0, le=1)  # paused µs per µs, per port
    storm_window_s: float | None = Field(default=None, gt=0)
    # Per port and priority. At most 1e6/s: one pause frame of quanta 0xFFFF holds a 100G port
    # for 335 µs, so ~3000 frames/s keep it paused; a limit far above that never trips.
    max_pause_frames_per_s: float = Field(default=50_000, gt=0)
    max_lossless_drops: int = Field(default=0, ge=0)
    max_crc_errors: int = Field(default=0, ge=0)
    # Polled at least once per longest storm window, or the live monitor cannot see a storm.
    poll_interval_s: float = Field(default=1.0, gt=0)
    measurement_timeout_s: float = Field(default=600.0, gt=0)
    roce_priority: int = Field(default=3, ge=0, le=7)
    # Dead-man timer on every changed target (SSH backend): restores the baseline by itself
    # unless renewed within this time (0 = off). See safety/deadman.py.
    deadman_timeout_s: float = Field(default=60.0, ge=0)
    # Cumulus NVUE: trial applies use NVUE's own commit-confirm (`nv config apply --confirm
    # <n>s`), which rolls back by itself this long after the apply unless confirmed -- it
    # outlives the tuner and is not renewed, so it must cover a whole trial (0 = off; 600 is
    # NVUE's default). See tuner/cluster/deadman.py.
    nvue_confirm_s: float = Field(default=600.0, ge=0)

    @field_validator(*SOFT_BOUNDS)
    @classmethod
    def _within_bound(cls, v: float | None, info: ValidationInfo) -> float | None:
        bound = SOFT_BOUNDS[str(info.field_name)]
        if v is None:
            return v
        if not math.isfinite(v):
            raise ValueError(f"{v} is not a finite number; must be less than or equal to "
                             f"{_num(bound)} (`ecntune --i-know` lifts the bound, never "
                             "finiteness)")
        if v > bound and not (info.context or {}).get("i_know"):
            raise ValueError(f"must be less than or equal to {_num(bound)}: a limit beyond it "
                             "no longer protects the canary (`ecntune --i-know ...` goes "
                             "beyond it; the override is printed and logged to MLflow)")
        return v

    def beyond_bounds(self) -> dict[str, str]:
        """Each limit past its ``SOFT_BOUNDS`` bound (``--i-know``): field -> "value (bound
        b)", for the console and MLflow."""
        return {k: f"{_num(getattr(self, k))} (bound {_num(b)})" for k, b in SOFT_BOUNDS.items()
                if getattr(self, k) is not None and getattr(self, k) > b}


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


class PfcThreshold(BaseModel):
    """When an egress queue makes PFC pause its senders, on a shared-buffer switch.

    The physics (SAI ``saibuffer.h``, ``SAI_BUFFER_PROFILE_ATTR_SHARED_DYNAMIC_TH``: "The
    threshold is set to the 2^n of available buffer of the pool"): an ingress priority group
    (PG) sends XOFF when its shared-pool occupancy ``s`` exceeds ``alpha * free``, with
    ``alpha = 2**dynamic_th`` (SONiC ``BUFFER_PROFILE|<pg profile>`` ``dynamic_th``, the
    ``threshold`` column of sonic-buildimage's ``pg_profile_lookup.ini``: 0 on SN2700, so
    alpha 1; Mellanox SAI ``mlnx_sai_buffer.c`` reads -8 as 0 and 7 as infinity) and ``free``
    = pool size ``B`` (``BUFFER_POOL|ingress_lossless_pool`` ``size``) less what every PG
    holds. A packet is charged to its ingress PG and to its egress queue at once, so when
    ``N`` ingress ports (the incast fan-in) feed one egress queue evenly, the queue holds
    ``Q = N*s`` and each PG crosses its threshold when ``s = alpha*(B - N*s)``, i.e. at

        Q_pfc = N * alpha * B / (1 + N * alpha)      (N * static_th for a static threshold)

    ECN acts first only if the queue reaches Kmax (full marking) below ``Q_pfc``. The PG's
    ``xoff`` field is headroom for bytes in flight after XOFF is sent, not a trigger, and
    bounds nothing here. ``Q_pfc`` grows with N, so the binding case is the fewest senders
    that congest the queue: ``fan_in`` = 2 where all links run at one speed, 1 where a faster
    port (an uplink) feeds a slower one. Other traffic in the pool only lowers ``Q_pfc``: that
    is what the margin (``xoff_margin_percent``) is for. The PGs' reserved buffer is left out
    (it only raises ``Q_pfc``), so the bound errs on the safe side.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    pool: str = Field(min_length=1)
    pool_bytes: int = Field(gt=0)
    dynamic_th: int | None = Field(default=None, ge=-8, le=8)  # log2 alpha (mmuconfig -a range)
    static_th_bytes: int | None = Field(default=None, gt=0)
    fan_in: int = Field(ge=1)
    source: str = ""

    @property
    def alpha(self) -> float:
        """2**dynamic_th; -8 and below is 0, 7 and above unbounded (Mellanox SAI)."""
        th = self.dynamic_th
        if th is None:
            return math.inf
        return 0.0 if th <= -8 else math.inf if th >= 7 else 2.0 ** th

    def onset_bytes(self) -> int:
        """``Q_pfc``: the egress queue depth at which the fan-in's PGs send XOFF."""
        n, b = self.fan_in, self.pool_bytes
        if self.static_th_bytes is not None:
            return min(n * self.static_th_bytes, b)
        a = self.alpha
        return b if math.isinf(a) else int(n * a * b / (1 + n * a))

    def explain(self) -> str:
        """The inputs, in the operator's terms."""
        th = (f"static_th {self.static_th_bytes} B" if self.static_th_bytes is not None else
              f"alpha {self.alpha:g} (dynamic_th {self.dynamic_th})")
        src = f"; {self.source}" if self.source else ""
        return (f"{self.fan_in} ingress PGs at {th} of pool {self.pool} "
                f"{self.pool_bytes} B send PFC XOFF at an egress queue of "
                f"{self.onset_bytes()} B{src}")

    def to_fact(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_facts(cls, facts: dict[str, str]) -> PfcThreshold | None:
        """The ``pfc_threshold`` fact of a ClusterDescription (None: not known)."""
        text = facts.get("pfc_threshold")
        if not text:
            return None
        try:
            return cls.model_validate(json.loads(text))
        except ValueError as exc:  # pydantic ValidationError included
            raise ValueError(f"facts pfc_threshold: {exc}") from None


def kmax_ceiling(threshold: PfcThreshold, limits: SafetyLimits) -> int:
    """The highest Kmax the ECN-before-PFC rule allows: ``Q_pfc`` less its margin."""
    return int(threshold.onset_bytes() * (1 - limits.xoff_margin_percent / 100))


def check_proposal(
    values: dict[str, int], *, pfc: PfcThreshold | None, line_rate_mbps: int,
    limits: SafetyLimits
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
    if kmax is not None and pfc is not None:
        ceiling = kmax_ceiling(pfc, limits)
        if kmax > ceiling:
            out.append(Violation(
                code="kmax_above_pfc_threshold",
                detail=f"kmax_bytes={kmax} above {ceiling} B ({pfc.explain()}; less a "
                       f"{limits.xoff_margin_percent:g} % margin): the ingress PGs would cross "
                       "their dynamic threshold and pause senders before ECN marks fully"))
    for name in RATE_KNOBS:
        rate = values.get(name)
        if rate is not None and rate > line_rate_mbps:
            out.append(Violation(code="rate_above_line_rate",
                                 detail=f"{name}={rate} Mbit/s above line rate {line_rate_mbps}"))
    return out
