"""The twin fitted to the canary (``ecntune calibrate``): what the gear reports is taken, what it
does not is fitted to the canary's measured baseline.

The twin (``screen.fabric``) is declared from what an operator believes of the gear: topology,
link speeds, a buffer from a datasheet. First what the canary reports replaces the declaration:
the switches' buffer configuration where a driver read it (SONiC: the lossless PG's pool
``size`` and ``dynamic_th``, ``tuner.drivers.sonic.pg_buffer``; an inventory's
``pfc_pool_bytes`` is a declaration too, not a reading), the NICs' link speed (``ethtool``) for
``nic_gbps`` and the leaves' uplink speed (CONFIG_DB ``PORT``) for ``uplink_gbps``. Then
``fit`` searches each parameter still free (the buffer, where nothing reported it, and the link
delay, which nothing reports), on a log scale, for the value whose simulated baseline is
closest to the measured one: the sum over metrics (the delay: the probe p50 only) of the
squared log ratio twin/canary (busbw, probe p50 and p99, and per second at the NICs ECN-marked
packets received and PFC pause; a metric at its floor on both sides says nothing and is left
out).

The link delay (the twin's base RTT: cable, NIC and switch latency in one number) is fitted to
the twin's resolution only: bytes move in whole steps of ``dt`` (1 µs), so a delay rounds to a
whole step, at least one (``rocesim.engine``), and every delay up to 1.5 µs moves a probe
alike (idle p50 3.04 µs on a 2-leaf fabric for 0.25, 0.5 and 1 µs); ties keep the value nearest
the declaration. The pure core takes a ``simulate(values) -> metrics`` function; the I/O
is at the edges.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pydantic import BaseModel

    from objectives.measurement import Measurement
    from tuner.experiment import Experiment, FabricSpec

FILE = "twin-calibration.json"
# Free parameters of the twin's topology: the factors of their declared value searched, and the
# metrics each is fitted on (None: all). The link delay is the base RTT, which the probes' median
# measures; fitted on every metric it made up for other errors (on the emulated cluster, whose
# stand-in counts busbw and pause its own way, it went to 3.5 µs).
FREE: dict[str, tuple[float, float, tuple[str, ...] | None]] = {
    "buffer_bytes": (0.25, 4.0, None),
    "link_delay_us": (0.25, 4.0, ("p50_us",)),
}
# Below these a metric is noise: busbw GB/s, µs, marked packets per s, paused µs per s (0.01 %
# of the time, a tenth of the finest pause guardrail the shipped experiments set: a canary paused
# 0.02 % of the time against a twin never paused is a 2x miss, not the 200x of a 1 µs/s floor).
FLOORS = {"busbw_gbytes_per_s": 0.01, "p50_us": 0.5, "p99_us": 0.5, "marks_per_s": 100.0,
          "pause_us_per_s": 100.0}
# The NICs' count of received RoCE packets with CE (mlx5 hw_counters, the notification point).
MARKS = "np_ecn_marked_roce_packets"
GRID = 9  # log-spaced factors per parameter in the coarse pass
Metrics = dict[str, float]


def metrics(ms: list[Measurement], priority: int) -> Metrics:
    """The medians over replicates of what the fit compares (missing metrics left out)."""
    from objectives.score import busbw_gbytes_per_s, pause_us_per_s, per_port_per_s

    rows: dict[str, list[float]] = {k: [] for k in FLOORS}
    for m in ms:
        bw = busbw_gbytes_per_s(m)
        if bw is not None:
            rows["busbw_gbytes_per_s"].append(bw)
        if m.latency is not None and m.latency.count > 0:
            rows["p50_us"].append(m.latency.p50_us)
            rows["p99_us"].append(m.latency.p99_us)
        marks = per_port_per_s(m, MARKS)
        if marks is not None:
            rows["marks_per_s"].append(marks)
        rows["pause_us_per_s"].append(pause_us_per_s(m, priority))
    return {k: float(np.median(v)) for k, v in rows.items() if v}


def residuals(measured: Metrics, twin: Metrics) -> Metrics:
    """log(twin / canary) per metric both sides have; a metric at its floor on both: none."""
    out = {}
    for k, floor in FLOORS.items():
        if k in measured and k in twin and max(measured[k], twin[k]) > floor:
            out[k] = math.log(max(twin[k], floor) / max(measured[k], floor))
    return out


def loss(measured: Metrics, twin: Metrics, only: tuple[str, ...] | None = None) -> float:
    """Sum of squared residuals (over ``only``'s metrics, if given); inf with none to compare."""
    r = [x for k, x in residuals(measured, twin).items() if only is None or k in only]
    return sum(x * x for x in r) if r else math.inf


@dataclass
class Fit:
    """The twin's declared values of what changed, what the switch reported (``taken``, with
    ``source``), what ``fit`` found, and the twin against the canary before and after."""

    declared: dict[str, float]
    taken: dict[str, float]
    fitted: dict[str, float]
    measured: Metrics
    twin_declared: Metrics
    twin_fitted: Metrics
    evaluations: int
    source: str = ""
    # free parameters no measured metric moved with (the same loss at every grid point): kept
    unidentified: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    @property
    def residuals_declared(self) -> Metrics:
        return residuals(self.measured, self.twin_declared)

    @property
    def residuals_fitted(self) -> Metrics:
        return residuals(self.measured, self.twin_fitted)

    def overrides(self) -> dict[str, Any]:
        """The twin topology's fields as taken and fitted (ints stay ints)."""
        return {k: (int(round(v)) if isinstance(self.declared[k], int) else round(v, 4))
                for k, v in {**self.taken, **self.fitted}.items()}

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "overrides": self.overrides(),
                "residuals_declared": self.residuals_declared,
                "residuals_fitted": self.residuals_fitted}


def fit(simulate: Callable[[dict[str, float]], Metrics], measured: Metrics,
        declared: dict[str, float],
        free: dict[str, tuple[float, float, tuple[str, ...] | None]] = FREE,
        rounds: int = 2, bounds: dict[str, tuple[float, float]] | None = None) -> Fit:
    """Coordinate search: each free parameter over ``GRID`` log-spaced factors of its value in
    ``declared`` (the twin's values with what the switch reported taken), within ``bounds``
    (the values the experiment file takes: ``field_bounds``), then halving the step around the
    best three times, on the loss over the parameter's own metrics (``FREE``); ``rounds``
    passes over the parameters. Ties go to the value
    nearest the declared one, so a parameter that moves no metric stays as declared instead of
    running to the end of its range. Every twin run is kept, so a point is never simulated
    twice."""
    seen: dict[tuple[tuple[str, float], ...], Metrics] = {}
    spans = {}
    for name, (lo, hi, only) in free.items():
        low, high = (bounds or {}).get(name, (0.0, math.inf))
        spans[name] = (max(lo, low / declared[name]), min(hi, high / declared[name]), only)

    def at(values: dict[str, float]) -> Metrics:
        key = tuple(sorted((k, round(v, 9)) for k, v in values.items()))
        if key not in seen:
            seen[key] = simulate(values)
        return seen[key]

    best = dict(declared)
    flat: set[str] = set()
    for _ in range(rounds):
        flat = set()
        for name, (lo, hi, only) in spans.items():
            def loss_at(log_factor: float, name: str = name,
                        only: tuple[str, ...] | None = only) -> float:
                return loss(measured, at({**best, name: declared[name] * math.exp(log_factor)}),
                            only)

            here, moved = _line_search(loss_at, math.log(lo), math.log(hi))
            if not moved:
                flat.add(name)
            best[name] = declared[name] * math.exp(here)
    return Fit(declared=dict(declared), taken={}, fitted={k: best[k] for k in free},
               measured=measured, twin_declared=at(dict(declared)), twin_fitted=at(best),
               evaluations=len(seen), unidentified=sorted(flat))


def field_bounds(model: type[BaseModel], name: str) -> tuple[float, float]:
    """The least and greatest value ``model`` takes for the numeric field ``name`` (its
    ``ge``/``gt`` and ``le``/``lt``; an open bound is taken as closed)."""
    low, high = 0.0, math.inf
    for m in model.model_fields[name].metadata:
        for attr in ("ge", "gt"):
            if getattr(m, attr, None) is not None:
                low = float(getattr(m, attr))
        for attr in ("le", "lt"):
            if getattr(m, attr, None) is not None:
                high = float(getattr(m, attr))
    return low, high


def _line_search(loss_at: Callable[[float], float], lo: float, hi: float) -> tuple[float, bool]:
    """The log factor in [lo, hi] (lo < 0 < hi) of least loss: ``GRID`` points, then the step
    halved around the best three times; ties go to the factor nearest 1 (log 0). Also whether
    the loss moved at all over the grid."""
    logs = np.linspace(lo, hi, GRID)
    step = float(logs[1] - logs[0])

    def rank(x: float) -> tuple[float, float]:
        x = float(np.clip(x, lo, hi))
        return loss_at(x), abs(x)

    moved = len({loss_at(float(x)) for x in logs}) > 1
    here = min((float(x) for x in logs), key=rank)
    for _refine in range(3):
        step /= 2
        here = float(np.clip(min((here - step, here, here + step), key=rank), lo, hi))
    return here, moved


def reported(facts: dict[str, str]) -> tuple[dict[str, int], str]:
    """The buffer the canary switches report (``pfc_threshold`` fact, read by a driver; an
    inventory's declaration does not count): twin topology values and where they came from."""
    from safety.limits import PfcThreshold

    th = PfcThreshold.from_facts(facts)
    if th is None or th.source.startswith("inventory") or "inventory pfc_" in th.pool:
        return {}, ""
    out = {"buffer_bytes": th.pool_bytes}
    if th.dynamic_th is not None and -7 <= th.dynamic_th <= 3:  # the twin's range
        out["pfc_alpha_log2"] = th.dynamic_th
    return out, th.source


def link_speed(field: str, speeds: dict[str, int | None], what: str, how: str
               ) -> tuple[dict[str, float], str]:
    """The twin's ``field`` (``nic_gbps``, ``uplink_gbps``) from the canary's link speeds in
    Mb/s (``what``: "NIC" or "uplink", read by ``how``): taken when every link reports one and
    they agree; else nothing, and the reason (the twin has one speed for each, and a link
    that reports none may be down)."""
    unread = sorted(n for n, v in speeds.items() if not v)
    if not speeds:
        return {}, f"{what} speed not taken: no canary {what} was read"
    if unread:
        return {}, f"{what} speed not taken: {how} gave none on {', '.join(unread)}"
    seen = sorted({v for v in speeds.values() if v})
    if len(seen) > 1:
        return {}, (f"{what} speed not taken: the canary's {what}s run at "
                    f"{', '.join(f'{v}Mb/s' for v in seen)} and the twin has one {what} speed")
    return {field: seen[0] / 1000}, f"{how} {seen[0]}Mb/s on {len(speeds)} {what}s"


def twin_spec(exp: Experiment) -> FabricSpec:
    """The twin as declared (``screen.fabric``; on the sim backend, the fabric itself)."""
    from tuner.errors import ConfigError

    if exp.screen.fabric is not None:
        return exp.screen.fabric
    if exp.fabric.backend != "sim":
        raise ConfigError("screen.fabric: required with fabric.backend ssh -- describe the "
                          "canary's topology, speeds and buffer for the twin")
    return exp.fabric.model_copy(update={"seed": exp.fabric.seed + 1})


def twin_canary(exp: Experiment) -> tuple[list[str], str]:
    """The twin's canary switches and the field that names them (for error messages)."""
    if exp.screen.canary_switches:
        return list(exp.screen.canary_switches), "screen.canary_switches"
    where = " (in the twin, screen.fabric)" if exp.screen.fabric is not None else ""
    return list(exp.canary.switches), f"canary.switches{where}"


def with_values(spec: FabricSpec, values: dict[str, Any]) -> FabricSpec:
    return spec.model_copy(update={"topology": spec.topology.model_copy(update=values)})


def problems(spec: FabricSpec, overrides: dict[str, Any]) -> str:
    """What keeps ``overrides`` from making a topology the experiment file could declare
    (field, type, bounds), one ``field: why`` per problem; "" if nothing does."""
    from pydantic import ValidationError

    from tuner.input_checks import error_message

    try:
        type(spec.topology).model_validate({**spec.topology.model_dump(), **overrides})
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {error_message(e)}"
                         for e in exc.errors())
    return ""


def _check(spec: FabricSpec, overrides: dict[str, Any], where: str) -> None:
    """A file edited by hand or damaged went into the twin unchecked: ConfigError naming
    ``where`` and each field."""
    from tuner.errors import ConfigError

    bad = problems(spec, overrides)
    if bad:
        raise ConfigError(f"{where}: overrides: {bad} -- delete it or run `ecntune calibrate` "
                          "again")


def save(results: Path, f: Fit, experiment: str) -> Path:
    from safety.files import write_file

    path = results / FILE
    write_file(path, json.dumps({"experiment": experiment, **f.to_json()}, indent=2) + "\n")
    return path


def load(results: Path, spec: FabricSpec) -> dict[str, Any] | None:
    """The saved fit, if it was made for this twin as declared (else None: a fit of another
    declaration says nothing about this one)."""
    from tuner.errors import ConfigError

    path = results / FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        declared, overrides = dict(data["declared"]), dict(data["overrides"])
        mine = _declares(spec, declared)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a calibration ecntune wrote ({exc}); delete it or run "
                          "`ecntune calibrate` again") from None
    if not mine:
        return None
    _check(spec, overrides, str(path))
    return {"overrides": overrides, "declared": declared, "file": str(path),
            **{k: data.get(k) for k in ("residuals_fitted", "at")}}


def for_twin(results: Path, spec: FabricSpec, recorded: dict[str, Any] | None
             ) -> dict[str, Any] | None:
    """The calibration a study's twin uses: the one the study recorded when its first process
    built the twin, if made for this declaration, so that every worker of a shared study, on
    any machine, builds the same twin; else the results folder's (``load``)."""
    if recorded is not None:
        try:
            mine = isinstance(recorded["overrides"], dict) \
                and _declares(spec, dict(recorded["declared"]))
        except (KeyError, TypeError, ValueError):  # recorded before fits kept their declaration
            mine = False
        if mine:
            _check(spec, recorded["overrides"], "the study's recorded calibration")
            return recorded
    return load(results, spec)


def _declares(spec: FabricSpec, declared: dict[str, Any]) -> bool:
    """Whether ``spec``'s topology is the one a fit started from (ValueError, TypeError: a
    declared value that is not a number)."""
    mine = spec.topology.model_dump()
    return all(k in mine and float(mine[k]) == float(v) for k, v in declared.items())
