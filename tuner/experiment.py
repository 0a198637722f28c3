"""The experiment file: one YAML document that says what to tune, where, and how to judge it.

``load_experiment(path)`` parses and validates it; every mistake becomes one ``ConfigError``
line per problem naming the file, the field path, the value given and what is allowed, e.g.::

    experiments/x.yaml: search.knobs.rpg_ai_rate.high: value 999999 -- Input should be less
    than or equal to 131071

The field reference lives in ``docs/experiment-file.md``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from objectives.score import Guardrails, check_weights
from objectives.verdict import MIN_PAIRS
from safety.limits import SafetyLimits
from safety.preflight import PreflightSpec
from tuner import storage_url
from tuner.errors import ConfigError
from tuner.settings import KNOBS
from tuner.workload import Workload

_STRICT = ConfigDict(frozen=True, extra="forbid")

# The one search dimension that is not a device knob: kmax_bytes = kmin_bytes * kmax_ratio.
KMAX_RATIO = "kmax_ratio"
# Names that become folders and run names (experiment, study, slice); fullmatch: anchored.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class TopologySpec(BaseModel):
    """rocesim ``Topology`` arguments (same names, same units)."""

    model_config = _STRICT
    kind: Literal["leaf_spine", "single_switch", "three_tier"] = "leaf_spine"
    leaves: int = Field(default=2, ge=1, le=64)  # three_tier: per pod
    spines: int = Field(default=2, ge=1, le=64)  # three_tier: per pod
    # three_tier: pods, super-spines (spines planes of super_spines / spines each) and the
    # spine <-> super-spine speed (None: uplink_gbps)
    pods: int = Field(default=1, ge=1, le=64)
    super_spines: int = Field(default=0, ge=0, le=256)
    core_gbps: float | None = Field(default=None, gt=0, le=1600)
    hosts_per_leaf: int = Field(default=4, ge=1, le=64)
    nics_per_host: int = Field(default=1, ge=1, le=8)
    nic_gbps: float = Field(default=100.0, gt=0, le=1600)
    uplink_gbps: float = Field(default=100.0, gt=0, le=1600)
    link_delay_us: float = Field(default=1.0, gt=0, le=1000)
    payload_bytes: int = Field(default=4096, ge=256, le=9000)
    buffer_bytes: int = Field(default=32 * 2**20, ge=2**16, le=2**31)
    # the lossless PGs' PFC dynamic threshold, as SONiC's dynamic_th: alpha = 2**value
    pfc_alpha_log2: int = Field(default=-3, ge=-7, le=3)
    # the twin's reading of dce_tcp_g (rocesim Topology): "vendor", mstflint's own text (the
    # gain), until hardware settles it; "kept", the share of alpha kept (docs/fidelity.md)
    dce_tcp_g_reading: Literal["kept", "vendor"] = "vendor"
    # rail-aligned leaves: NIC k of every host of a group of hosts_per_leaf on its own leaf
    rails: bool = False

    @model_validator(mode="after")
    def _rails(self) -> TopologySpec:
        if self.kind == "three_tier":
            if self.pods < 2:
                raise ValueError(f"pods: a three_tier fabric needs at least 2 pods, got "
                                 f"{self.pods}")
            if self.super_spines < 1 or self.super_spines % self.spines:
                raise ValueError(f"super_spines ({self.super_spines}) must be a positive "
                                 f"multiple of spines ({self.spines}): one plane of "
                                 "super-spines per spine of a pod")
        elif self.pods != 1 or self.super_spines or self.core_gbps is not None:
            raise ValueError("pods, super_spines, core_gbps: only for kind three_tier")
        if self.rails and self.kind != "leaf_spine":
            raise ValueError("rails: rail-aligned leaves need kind leaf_spine")
        if self.rails and self.leaves % self.nics_per_host:
            raise ValueError(f"rails: leaves ({self.leaves}) must be a multiple of "
                             f"nics_per_host ({self.nics_per_host}), one leaf per rail")
        return self


HashField = Literal["src_ip", "dst_ip", "udp_sport"]
HASH_FIELDS: tuple[HashField, ...] = ("src_ip", "dst_ip", "udp_sport")


class EcmpSpec(BaseModel):
    """rocesim ``EcmpConfig``: the leaves' hash fields and the NICs' UDP source-port entropy
    (``hash_fields: [udp_sport]`` with ``udp_sport: fixed`` plants an ECMP collision)."""

    model_config = _STRICT
    hash_fields: list[HashField] = Field(
        default_factory=lambda: list(HASH_FIELDS), min_length=1)
    udp_sport: Literal["per_qp", "fixed"] = "per_qp"


class FabricSpec(BaseModel):
    """Where the study runs: ``sim`` (rocesim) is built in; ``ssh`` lands with its own file."""

    model_config = _STRICT
    backend: Literal["sim", "ssh"] = "sim"
    topology: TopologySpec = Field(default_factory=TopologySpec)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    # Simulated-time cap of one measurement (finite; what it costs in memory is checked against
    # the machine, tuner/input_checks.py), and the simulated time between live safety polls
    # (at least 1 µs: finer never ends).
    max_time_us: float = Field(default=50_000.0, gt=0, allow_inf_nan=False)
    step_us: float = Field(default=500.0, ge=1, le=1_000_000)
    ecmp: EcmpSpec = Field(default_factory=EcmpSpec)  # sim backend only
    # ssh backend (tuner.inventory): the inventory inline, or a YAML file ($VARS expanded).
    inventory: dict[str, Any] | None = None
    inventory_file: str | None = None

    @model_validator(mode="after")
    def _ssh_inventory(self) -> FabricSpec:
        given = (self.inventory is not None) + (self.inventory_file is not None)
        if self.backend == "ssh" and given != 1:
            raise ValueError("backend ssh needs exactly one of inventory / inventory_file")
        if self.backend != "ssh" and given:
            raise ValueError("inventory / inventory_file only apply to backend ssh")
        return self


class CanarySpec(BaseModel):
    """The slice trials may change: these switches and the NICs of the hosts under them."""

    model_config = _STRICT
    switches: list[str] = Field(default_factory=lambda: ["leaf0"], min_length=1)
    # Disjoint slices for parallel workers (``ecntune worker --slice``, tuner/slices.py):
    # {name: [switches]}, or N identical simulated copies of ``switches`` (sim backend).
    slices: int | dict[str, list[str]] | None = None


class KnobRange(BaseModel):
    """One searched dimension. ``low``/``high`` default to the knob's hardware range."""

    model_config = _STRICT
    # Finite (.inf and .nan are refused by name): an infinite kmax_ratio reached the sampler.
    low: float | None = Field(default=None, allow_inf_nan=False)
    high: float | None = Field(default=None, allow_inf_nan=False)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> KnobRange:
        if self.low is not None and self.high is not None and self.low >= self.high:
            raise ValueError(f"low ({self.low:g}) must be below high ({self.high:g})")
        if self.log and self.low is not None and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got {self.low:g}")
        return self


class SearchSpec(BaseModel):
    """Which knobs are searched (and over what range) and which are pinned."""

    model_config = _STRICT
    knobs: dict[str, KnobRange] = Field(default_factory=dict)
    fixed: dict[str, int] = Field(default_factory=dict)
    # After trial 0, try the known-good starting points (tuner/warm_starts.py) first.
    warm_starts: bool = True

    @field_validator("knobs")
    @classmethod
    def _known_knobs(cls, v: dict[str, KnobRange]) -> dict[str, KnobRange]:
        for name, rng in v.items():
            if name == "kmax_bytes":
                raise ValueError("kmax_bytes is searched as kmax_ratio (kmax = kmin * ratio) so "
                                 "that kmin < kmax always holds; use kmax_ratio instead")
            if name == KMAX_RATIO:
                if rng.low is not None and rng.low <= 1.0:
                    raise ValueError(f"kmax_ratio.low must be above 1, got {rng.low:g}")
                continue
            knob = KNOBS.get(name)
            if knob is None:
                raise ValueError(f"unknown knob {name!r}; allowed: {', '.join(KNOBS)}, "
                                 f"{KMAX_RATIO}")
            for side in ("low", "high"):
                val = getattr(rng, side)
                if val is not None and not knob.lo <= val <= knob.hi:
                    raise ValueError(f"{name}.{side}={val:g} outside the hardware range "
                                     f"{knob.lo}..{knob.hi} {knob.unit}")
        return v

    @field_validator("fixed")
    @classmethod
    def _known_fixed(cls, v: dict[str, int]) -> dict[str, int]:
        for name, value in v.items():
            knob = KNOBS.get(name)
            if knob is None:
                raise ValueError(f"unknown knob {name!r}; allowed: {', '.join(KNOBS)}")
            if not knob.lo <= value <= knob.hi:
                raise ValueError(f"{name}={value} outside the hardware range "
                                 f"{knob.lo}..{knob.hi} {knob.unit}")
        return v

    @model_validator(mode="after")
    def _disjoint(self) -> SearchSpec:
        both = set(self.knobs) & set(self.fixed)
        if both:
            raise ValueError(f"knobs both searched and fixed: {sorted(both)}")
        if KMAX_RATIO in self.knobs and "kmin_bytes" not in self.knobs:
            raise ValueError("kmax_ratio needs kmin_bytes in knobs too")
        return self


class ObjectiveSpec(BaseModel):
    """What a study maximises and the guardrails it must keep (see ``objectives/score.py``)."""

    model_config = _STRICT
    # primary: the primary metric alone, subject to the guardrails; scalar: an explicit
    # composite of busbw, latency and PFC terms (weights below); multi: busbw up, p99 down.
    mode: Literal["primary", "scalar", "multi"] = "primary"
    primary: Literal["busbw", "p99_us"] = "busbw"
    guardrails: Guardrails = Field(default_factory=Guardrails)
    busbw_weight: float = Field(default=1.0, ge=0, allow_inf_nan=False)  # scalar mode only
    latency_weight: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    pfc_weight: float = Field(default=0.5, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _some_weight(self) -> ObjectiveSpec:
        if self.mode != "scalar":
            return self
        if self.busbw_weight + self.latency_weight + self.pfc_weight <= 0:
            raise ValueError("at least one of busbw_weight, latency_weight, pfc_weight must "
                             "be above 0")
        problem = check_weights(self.busbw_weight, self.latency_weight, self.pfc_weight)
        if problem:
            raise ValueError(problem)
        return self


class BudgetSpec(BaseModel):
    model_config = _STRICT
    trials: int = Field(default=20, ge=1, le=100_000)  # proposals after the baseline trial 0
    wall_time_s: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    # Paired replicates per trial: every trial is measured on the same K placements/seeds and
    # scored against the baseline's K. "auto": K from the noise of 5 baseline replicates.
    repeats: int | Literal["auto"] = "auto"
    repeats_max: int = Field(default=6, ge=1, le=50)
    # A trial whose running paired score is this far (log2 units) below the median of the other
    # trials on the same replicates stops early (0 = never).
    prune_margin: float = Field(default=0.05, ge=0, allow_inf_nan=False)
    # Re-measure the baseline every this many trials to show drift (0 = never).
    baseline_every: int = Field(default=10, ge=0)
    # At the end, the top ``confirm_top_k`` candidates and the baseline are measured interleaved
    # on ``confirm_repeats`` fresh paired replicates; a winner needs its 95 % interval above 0.
    confirm_top_k: int = Field(default=3, ge=1, le=20)
    confirm_repeats: int = Field(default=8, ge=0, le=100)  # 0: no confirmation, no winner
    # A trial that would go to the confirmation (a warm start, or better than the worst of the
    # top ``confirm_top_k`` candidates so far) is measured on further study placements, up to
    # this many in all, before it counts as a candidate; it stops at the first guardrail broken.
    # A guardrail met on 2 placements says little about 8 fresh ones (0: ``repeats`` only).
    candidate_placements: int = Field(default=5, ge=0, le=50)

    @field_validator("confirm_repeats")
    @classmethod
    def _enough_pairs(cls, v: int) -> int:
        if 0 < v < MIN_PAIRS:
            raise ValueError(f"at least {MIN_PAIRS} paired confirmation repeats are needed for "
                             "an interval worth stating (0 skips the confirmation: then "
                             "nothing is ever declared a winner)")
        return v


MODEL_BASED = ("tpe", "local-tpe", "cmaes", "gp")  # samplers with a random start-up


class SamplerSpec(BaseModel):
    model_config = _STRICT
    # twin: the twin explores, the canary confirms (tuner/twin_search.py), the best measured by
    # bench/search.py; hillclimb, ecn-shifter: the benchmark's alternatives (tuner/samplers.py)
    name: Literal["twin", "tpe", "local-tpe", "random", "cmaes", "gp", "qmc", "hillclimb",
                  "ecn-shifter"] = "twin"
    seed: int | None = Field(default=0, ge=0, le=2**32 - 1)  # numpy's seed range
    startup_trials: int = Field(default=5, ge=0, le=10_000)  # random proposals before TPE models
    twin_trials: int = Field(default=60, ge=0, le=100_000)  # twin: trials of its exploration

    @property
    def random_startup(self) -> int:
        """Random proposals before a model-based sampler (TPE, CMA-ES, GP) takes over: the
        start-up that ``rolled_back_share`` leaves out. The others have none: random and QMC
        never model, the hill climber and the shifter step from the start, twin starts from the
        twin."""
        return self.startup_trials if self.name in MODEL_BASED else 0


class ModelError(BaseModel):
    """One copy of the twin built wrong on purpose (``screen.ensemble``): factors on the twin's
    buffer, link delay (its base RTT) and PFC dynamic threshold alpha (a power of two, as
    ``pfc_alpha_log2`` steps). Every copy also hashes and places with a seed of its own."""

    model_config = _STRICT
    buffer: float = Field(default=1.0, gt=0, le=16)
    link_delay: float = Field(default=1.0, gt=0, le=16)
    pfc_alpha: float = Field(default=1.0, gt=0, le=16)

    @field_validator("pfc_alpha")
    @classmethod
    def _power_of_two(cls, v: float) -> float:
        if not math.log2(v).is_integer():
            raise ValueError("a power of two (0.25, 0.5, 1, 2, 4 ...): the dynamic "
                             "threshold is set as 2**pfc_alpha_log2")
        return v

    @property
    def label(self) -> str:
        parts = [f"{name} x{v:g}" for name, v in (("buffer", self.buffer),
                                                  ("link delay", self.link_delay),
                                                  ("PFC alpha", self.pfc_alpha)) if v != 1.0]
        return ", ".join(parts) or "another hash seed"

    def topology(self, topo: TopologySpec) -> dict[str, Any]:
        """The fields of ``topo`` this error changes, as the topology declares them."""
        return {"buffer_bytes": int(round(topo.buffer_bytes * self.buffer)),
                "link_delay_us": topo.link_delay_us * self.link_delay,
                "pfc_alpha_log2": topo.pfc_alpha_log2 + int(math.log2(self.pfc_alpha))}

    def refusal(self, twin: FabricSpec, i: int) -> str:
        """Why ``twin`` built with this error (``screen.ensemble[i]``) is not a topology the
        file could declare; "" if it is."""
        from tuner.calibrate import problems

        bad = problems(twin, self.topology(twin.topology))
        return f"screen.ensemble[{i}]: {self.label} takes the twin out of range: {bad}" \
            if bad else ""


class ScreenSpec(BaseModel):
    """Pre-screening of proposals on the digital twin (``tuner/screen.py``)."""

    model_config = _STRICT
    mode: Literal["off", "twin"] = "off"
    # The twin: a rocesim fabric configured like the canary. Default (sim backend only): the
    # experiment's own fabric with the next seed, so its placements differ from the canary's.
    fabric: FabricSpec | None = None
    canary_switches: list[str] | None = None  # default: canary.switches
    # Placements each setting is measured on, on the twin (paired with the twin's baseline),
    # every guardrail judged on each, as the canary judges them. 1 by default: 2 doubled the
    # twin's cost and confirmed no more winners (docs/benchmarks.md, search notes).
    placements: int = Field(default=1, ge=1, le=8)
    # Copies of the twin built wrong on purpose (an uncertainty-aware screen): a storm that
    # any copy predicts screens a proposal, a busbw loss only one that the twin and every copy
    # predict. Each copy costs one more twin measurement per placement and setting. Unwritten:
    # none on rocesim, ``tuner.screen.REAL_GEAR_ENSEMBLE`` on a twin of real gear.
    ensemble: list[ModelError] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _ensemble(self) -> ScreenSpec:
        if self.ensemble and self.mode != "twin":
            raise ValueError("ensemble: applies to mode twin (the screen), not to mode "
                             f"{self.mode}")
        return self


class TrackingSpec(BaseModel):
    """MLflow: ``uri`` defaults to ``sqlite:///<results_dir>/mlflow.db``."""

    model_config = _STRICT
    enabled: bool = True
    uri: str | None = None
    experiment: str | None = None  # MLflow experiment name; default "ecntune/<name>"

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        return None if v is None else storage_url.check_tracking(v)


def check_name(value: str, field: str) -> str:
    """A name that becomes a folder or a run name (a study, a slice): ``ConfigError`` unless it
    is 1-64 letters, digits, '_', '-', '.', starting with a letter or digit."""
    if not NAME.fullmatch(value):
        raise ConfigError(f"{field}: value {value!r} -- use 1-64 letters, digits, '_', '-', "
                          "'.', starting with a letter or digit (it names a folder and runs)")
    return value


class Experiment(BaseModel):
    """A whole experiment file."""

    model_config = _STRICT
    name: str
    description: str = ""
    fabric: FabricSpec = Field(default_factory=FabricSpec)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    current: dict[str, int] = Field(default_factory=dict)  # what the fabric runs today
    workload: Workload
    search: SearchSpec = Field(default_factory=SearchSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    safety: SafetyLimits = Field(default_factory=SafetyLimits)
    preflight: PreflightSpec = Field(default_factory=PreflightSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    screen: ScreenSpec = Field(default_factory=ScreenSpec)
    storage: str | None = None  # Optuna storage URL; default sqlite:///<results_dir>/optuna.db
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    results_dir: str = ""  # default results/<name> (filled in by the validator below)

    @model_validator(mode="before")
    @classmethod
    def _default_results_dir(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("results_dir") and data.get("name"):
            data = {**data, "results_dir": f"results/{data['name']}"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.fullmatch(v):
            raise ValueError("use 1-64 letters, digits, '_', '-', '.' (it names files and runs)")
        return v

    @field_validator("results_dir")
    @classmethod
    def _results_dir(cls, v: str) -> str:
        # a file's results_dir climbing out with '..' puts journals and stores wherever the
        # file says; an operator who means another folder names it (absolute, or --results)
        if ".." in Path(v).parts:
            raise ValueError(f"{v!r} climbs out with '..' -- give an absolute path (or leave "
                             "it out and pass --results)")
        return v

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        return None if v is None else storage_url.check_storage(v)

    @field_validator("current")
    @classmethod
    def _current(cls, v: dict[str, int]) -> dict[str, int]:
        return SearchSpec._known_fixed(v)

    @model_validator(mode="after")
    def _collectives(self) -> Experiment:
        if not self.workload.collectives and not self.workload.probes:
            raise ValueError("workload needs at least one collective or probe part to score")
        needs = {"busbw": "collective", "p99_us": "probe"}[self.objective.primary]
        have = self.workload.collectives if needs == "collective" else self.workload.probes
        if self.objective.mode == "primary" and not have:
            raise ValueError(f"objective.primary {self.objective.primary} needs a {needs} part "
                             "in the workload")
        if self.objective.mode == "multi" and not (self.workload.collectives
                                                   and self.workload.probes):
            raise ValueError("objective.mode multi (busbw up, p99 down) needs both a collective "
                             "and a probe part in the workload")
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_sampler(cls, data: Any) -> Any:
        """Without ``sampler.name``: ``twin`` (the field's default) where the experiment has a
        twin (the simulator backend, or ``screen.fabric`` describing the canary), else ``tpe``.
        Either way ``name`` stays out of the sampler's fields set: the file did not choose."""
        if not isinstance(data, dict):
            return data
        sampler, fabric, screen = (data.get(k) for k in ("sampler", "fabric", "screen"))
        sampler = {} if sampler is None else sampler
        if not isinstance(sampler, dict) or "name" in sampler:
            return data
        backend = fabric.get("backend", "sim") if isinstance(fabric, dict) else "sim"
        if backend == "sim" or (isinstance(screen, dict) and screen.get("fabric")):
            return data
        try:
            spec = SamplerSpec.model_validate(sampler)
        except ValidationError:
            return data  # reported with its field by the validation proper
        return {**data, "sampler": SamplerSpec.model_construct(
            _fields_set=spec.model_fields_set, **{**spec.model_dump(), "name": "tpe"})}

    @model_validator(mode="after")
    def _budget_fits(self) -> Experiment:
        # A model-based sampler the file chose must have budget.trials for its random start-up
        # plus the candidates to confirm, or the study ends before the model proposes anything
        # worth confirming.
        startup, top_k = self.sampler.random_startup, self.budget.confirm_top_k
        if startup and "name" in self.sampler.model_fields_set \
                and self.budget.trials < startup + top_k:
            raise ValueError(
                f"budget.trials {self.budget.trials} is smaller than sampler.startup_trials "
                f"({startup} random proposals before {self.sampler.name} models anything) plus "
                f"budget.confirm_top_k ({top_k} candidates to confirm): raise budget.trials to "
                f"at least {startup + top_k}, or lower the other two")
        return self

    @model_validator(mode="after")
    def _ensemble_builds(self) -> Experiment:
        twin = self.screen.fabric or self.fabric  # as declared (calibration: TwinScreen)
        for i, err in enumerate(self.screen.ensemble):
            bad = err.refusal(twin, i)
            if bad:
                raise ValueError(bad)
        return self

    @model_validator(mode="after")
    def _twin_exists(self) -> Experiment:
        if self.sampler.name == "twin" and self.fabric.backend != "sim" \
                and self.screen.fabric is None:
            raise ValueError("sampler.name twin searches a digital twin of the canary: "
                             "describe it in screen.fabric (topology, speeds, buffer), or "
                             "choose another sampler.name (tpe, hillclimb, ...)")
        return self

    # Derived locations ---------------------------------------------------------------------
    @property
    def results_path(self) -> Path:
        return Path(self.results_dir)

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{self.results_path / 'optuna.db'}"

    @property
    def tracking_uri(self) -> str:
        return self.tracking.uri or f"sqlite:///{self.results_path / 'mlflow.db'}"

    @property
    def tracking_experiment(self) -> str:
        return self.tracking.experiment or f"ecntune/{self.name}"


def _walk_fields(loc: tuple[Any, ...]) -> list[str] | None:
    """The allowed field names of the model at ``loc`` (for 'extra field' errors)."""
    model: Any = Experiment
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return None
        ann = fields[part].annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    fields = getattr(model, "model_fields", None)
    return list(fields) if fields else None


def format_errors(source: str, exc: ValidationError) -> str:
    """One line per problem: ``file: field.path: value V -- what is wrong / allowed``."""
    from tuner.input_checks import error_message

    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "<top level>"
        msg = error_message(err)
        if err["type"] == "extra_forbidden":
            allowed = _walk_fields(loc[:-1])
            msg = "unknown field" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        elif err["type"] == "literal_error" and "ctx" in err:
            msg = f"not allowed; allowed: {err['ctx'].get('expected')}"
        value = err.get("input")
        if isinstance(value, str) and storage_url.has_secret(value):
            value = storage_url.hide(value)  # a password never reaches a message
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{source}: {where}: value {shown} -- {msg}")
    return "\n".join(lines)


def parse_experiment(text: str, source: str = "<experiment>", *,
                     i_know: bool | None = None) -> Experiment:
    """Validate experiment YAML text; raises ``ConfigError`` naming source, field and value.

    ``i_know``: accept safety limits past their bounds (default: ``ecntune --i-know``); a
    stored experiment read to restore or report, not to tune, passes True."""
    from tuner.input_checks import i_know as i_know_flag
    from tuner.input_checks import load_yaml, value_problems

    data = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    problems = value_problems(data, Experiment)
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems[:10]))
    context = {"i_know": i_know_flag() if i_know is None else i_know}
    try:
        return Experiment.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(format_errors(source, exc)) from None


def load_experiment(path: str | Path, *, i_know: bool | None = None) -> Experiment:
    """Read and validate an experiment file (``i_know``: see ``parse_experiment``)."""
    from tuner.input_checks import read_text_file

    return parse_experiment(read_text_file(path, "experiment file"), str(path), i_know=i_know)
