"""The search space, as plain data (``tuner.optuna_io`` turns it into Optuna distributions).

Kmax is never searched directly: the space holds ``kmax_ratio`` and ``kmax_bytes`` is
``round(kmin_bytes * kmax_ratio)`` with ``kmax_ratio > 1``, so every proposal has Kmin < Kmax.
Knobs not searched keep the baseline's value unless the experiment pins them (``search.fixed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tuner.experiment import KMAX_RATIO, Experiment, KnobRange
from tuner.settings import KNOBS

# The default space: the knobs issue #3 names, over ranges that hold the factory defaults
# (shared/reference/INDEX.md section 2) and stay well inside the hardware ranges.
DEFAULT_SPACE: dict[str, KnobRange] = {
    "kmin_bytes": KnobRange(low=5_000, high=4_000_000, log=True),
    KMAX_RATIO: KnobRange(low=1.5, high=20.0, log=True),
    "pmax_percent": KnobRange(low=1, high=100, log=True),
    "rpg_time_reset": KnobRange(low=2, high=2_000, log=True),
    "rpg_ai_rate": KnobRange(low=1, high=1_000, log=True),
    "rpg_hai_rate": KnobRange(low=5, high=5_000, log=True),
    "rpg_min_dec_fac": KnobRange(low=1, high=100),
    "rate_reduce_monitor_period": KnobRange(low=1, high=1_000, log=True),
    "min_time_between_cnps": KnobRange(low=0, high=500),
    # the knob's whole range, as mstflint's text reads it (the gain g = value/1024; the
    # factory 1019 included); ``default_space`` narrows it where the twin reads it as kept.
    "dce_tcp_g": KnobRange(),
    "rpg_byte_reset": KnobRange(low=64, high=32_767, log=True),
    "rpg_threshold": KnobRange(low=1, high=31),
}


@dataclass(frozen=True)
class Dim:
    """One searched dimension: integer device knob, or the float ``kmax_ratio``."""

    name: str
    low: float
    high: float
    log: bool
    integer: bool
    unit: str


def _squeeze(x: float, lo: float, hi: float, new_hi: float, log: bool) -> float:
    """``x`` in [lo, hi] mapped onto [lo, new_hi] in proportion (on a log axis if ``log``).
    Nothing to map onto (``new_hi`` below ``lo``: no point of the box is allowed): ``x`` as it
    is, for the static limits to refuse, never a value outside the experiment's box."""
    if new_hi >= hi or hi <= lo or new_hi < lo:
        return x
    if log and lo > 0:
        t = math.log(x / lo) / math.log(hi / lo)
        return float(lo * (new_hi / lo) ** t)
    return lo + (x - lo) * (new_hi - lo) / (hi - lo)


def _unsqueeze(y: float, lo: float, hi: float, new_hi: float, log: bool) -> float:
    """The inverse of ``_squeeze`` (clamped to [lo, hi])."""
    if new_hi >= hi or hi <= lo or new_hi < lo:
        return y
    y = min(max(y, lo), new_hi)
    if log and lo > 0:
        t = math.log(y / lo) / math.log(new_hi / lo) if new_hi > lo else 0.0
        return float(lo * (hi / lo) ** t)
    return lo + (y - lo) * (hi - lo) / (new_hi - lo) if new_hi > lo else lo


@dataclass(frozen=True)
class SearchSpace:
    dims: tuple[Dim, ...]
    fixed: dict[str, int]
    kmax_bound: int | None = None  # the Kmax ceiling the static limits allow (bytes)

    def bounded(self, kmax_bound: int | None) -> SearchSpace:
        """This space with the static Kmax ceiling built into its values (module docstring)."""
        return replace(self, kmax_bound=kmax_bound)

    def _ecn_dims(self) -> tuple[Dim, Dim] | None:
        by = {d.name: d for d in self.dims}
        if self.kmax_bound is None or "kmin_bytes" not in by or KMAX_RATIO not in by:
            return None
        return by["kmin_bytes"], by[KMAX_RATIO]

    def _ecn_values(self, kmin_p: float, ratio_p: float) -> tuple[int, int]:
        """(kmin, kmax) of the Kmin and ratio params, under the ceiling when there is one."""
        dims = self._ecn_dims()
        if dims is None:
            kmin = int(round(kmin_p))
            return kmin, int(round(kmin * ratio_p))
        dk, dr = dims
        bound = float(self.kmax_bound)  # type: ignore[arg-type]
        if bound / dr.low < dk.low:  # no point of the box is allowed: the limits refuse it
            kmin = int(round(kmin_p))
            return kmin, int(round(kmin * ratio_p))
        kmin = int(round(_squeeze(kmin_p, dk.low, dk.high, bound / dr.low, dk.log)))
        r_hi = max(dr.low, bound / max(kmin, 1))
        ratio = _squeeze(ratio_p, dr.low, dr.high, r_hi, dr.log)
        return kmin, min(int(kmin * ratio), int(bound))

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.dims]

    def values(self, params: dict[str, float], baseline: dict[str, int]) -> dict[str, int]:
        """Every knob value of a proposal: baseline, overlaid by fixed knobs, then the params.

        Values are not clamped: a proposal outside a hardware range is the safety check's to
        reject, not ours to hide.
        """
        out = dict(baseline)
        out.update(self.fixed)
        for name, value in params.items():
            if name != KMAX_RATIO:
                out[name] = int(round(value))
        if KMAX_RATIO in params:
            kmin_p = params.get("kmin_bytes", out["kmin_bytes"])
            out["kmin_bytes"], out["kmax_bytes"] = self._ecn_values(float(kmin_p),
                                                                    float(params[KMAX_RATIO]))
        return out

    def params_of(self, values: dict[str, int]) -> dict[str, float]:
        """The params that reproduce ``values`` (used to enqueue the baseline as trial 0)."""
        out: dict[str, float] = {}
        for d in self.dims:
            if d.name == KMAX_RATIO:
                out[d.name] = values["kmax_bytes"] / values["kmin_bytes"]
            else:
                out[d.name] = values[d.name]
        dims = self._ecn_dims()
        if dims is not None:  # invert the ceiling's map (a point above it lands on its edge)
            dk, dr = dims
            bound = float(self.kmax_bound)  # type: ignore[arg-type]
            kmin, ratio = values["kmin_bytes"], out[KMAX_RATIO]
            out["kmin_bytes"] = _unsqueeze(kmin, dk.low, dk.high, bound / dr.low, dk.log)
            out[KMAX_RATIO] = _unsqueeze(ratio, dr.low, dr.high,
                                         max(dr.low, bound / max(kmin, 1)), dr.log)
        return out

    def describe(self) -> dict[str, str]:
        """``{"kmin_bytes": "5000..4000000 bytes log", ...}`` for MLflow params and reports."""
        out = {d.name: f"{d.low:g}..{d.high:g} {d.unit}{' log' if d.log else ''}"
               for d in self.dims}
        out.update({f"fixed.{k}": str(v) for k, v in self.fixed.items()})
        return out


def default_space(exp: Experiment) -> dict[str, KnobRange]:
    """``DEFAULT_SPACE`` for ``exp``'s fabric. ``dce_tcp_g`` spans the knob's whole range on
    real hardware (the vendors' texts disagree on which way the value goes, so nothing is
    ruled out there) and on a twin that reads it as mstflint does (the default). A twin that
    reads it as the share of alpha kept (``fabric.topology.dce_tcp_g_reading: kept``) searches
    the gains 1/1024 to 1/4 (768..1023): below them alpha forgets congestion within
    microseconds there, the rate cuts vanish and the incast storms."""
    space = dict(DEFAULT_SPACE)
    if exp.fabric.backend == "sim" and exp.fabric.topology.dce_tcp_g_reading == "kept":
        space["dce_tcp_g"] = KnobRange(low=768, high=1_023)
    return space


def build_space(exp: Experiment) -> SearchSpace:
    """The experiment's space (``search.knobs``, or ``default_space`` when empty)."""
    chosen = exp.search.knobs or {k: v for k, v in default_space(exp).items()
                                  if k not in exp.search.fixed}
    dims = []
    for name, rng in chosen.items():
        if name == KMAX_RATIO:
            dflt = DEFAULT_SPACE[KMAX_RATIO]
            low = rng.low if rng.low is not None else dflt.low
            high = rng.high if rng.high is not None else dflt.high
            assert low is not None and high is not None
            dims.append(Dim(name, float(low), float(high), rng.log, False, "x kmin"))
            continue
        knob = KNOBS[name]
        low = rng.low if rng.low is not None else knob.lo
        high = rng.high if rng.high is not None else knob.hi
        dims.append(Dim(name, float(int(low)), float(int(high)), rng.log, True, knob.unit))
    return SearchSpace(dims=tuple(dims), fixed=dict(exp.search.fixed))
