"""``sampler: twin`` -- the twin explores, the canary confirms.

Canary time is scarce and a twin trial costs a few hundredths of a second, so the search runs on
the twin and the canary only measures what the twin ranks best, corrected by what the canary has
shown so far:

1. **Explore** (once, at the first proposal): a multivariate TPE study on the twin alone,
   ``twin_trials`` trials, scored against the twin's own baseline with the study's objective and
   guardrails (``TwinScreen.evaluate``: the score, and each guardrail's signed margin; the
   violation is the sum of their positive parts). The canary's baseline and warm starts seed it.
2. **Refine** (every proposal): ``local`` steps around the canary's incumbent (the best feasible
   canary trial; while there is none, the measured trial closest to meeting every guardrail),
   measured on the twin too, join the pool.
3. **Correct**: the canary re-ranks the twin. The residuals (canary - twin) of the score and of
   each guardrail's margin of every measured trial are smoothed over the search space (Gaussian
   kernel in the unit cube, shrunk towards the residuals' mean), so the twin's bias is removed
   where the canary has been and the prediction is left uncertain where it has not. Each
   guardrail is corrected on its own: the canary judges every guardrail on its worst
   placement and the twin on its own placements, so each is biased by its own amount, and a
   summed violation (0 wherever the twin meets every guardrail, however comfortably) would
   carry one guardrail's bias onto points that meet it with room to spare. A rollback on the
   canary (a storm, drops) makes its neighbourhood likelier to roll back too; a guardrail break
   is corrected through its margin, not banned.
4. **Propose**, among the pool points the twin measured safe that the canary has not measured
   and is not measuring now (other workers' trials included), nor any whose knob values equal
   those of such a trial (params that round to the same settings): first those whose
   neighbourhood rolled back in fewer than half the weighted cases; then, by Deb's rule,
   those predicted to meet every guardrail (optimistic violation 0: every corrected margin,
   less ``kappa`` uncertainties, at most 0) by the highest
   ``prediction + kappa * uncertainty``, or, while none is, the smallest optimistic violation.
   With no safe point left, a hill-climb step.

The sampler keeps no state a resume needs beyond the study itself: the pool is rebuilt from the
twin (same seed, same pool) and the corrections from the trials. Without a twin attached (the
loop attaches one, ``attach``), it hill-climbs. Twin trials are counted apart from canary trials
(``twin_trials``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner import optuna_io, study_store
from tuner.samplers import HillClimbSampler, _bounds, _clip, _finished

# A canary outcome that says the setting broke a safety limit (a storm, drops): not a guardrail
# (``infeasible``, corrected through the violation) and not a failed SSH link.
_BAD = ("rolled_back",)
# The violation told to the twin's TPE for a storm: above any sum of guardrail margins (each
# is a tanh, at most 1).
_STORM = 10.0


@dataclass(frozen=True)
class TwinResult:
    """One twin trial: its score against the twin's baseline and each guardrail's signed margin
    there (the study's constraints: met when <= 0). Score None: it stormed or broke a safety
    limit."""

    score: float | None
    margins: dict[str, float] = field(default_factory=dict)

    @property
    def violation(self) -> float:
        """By how much it broke the guardrails (the sum of the positive margins, 0 when it met
        every one; ``inf`` when it was not safe)."""
        if self.score is None:
            return math.inf
        return float(sum(max(v, 0.0) for v in self.margins.values()))

    @property
    def feasible(self) -> bool:
        return self.violation <= 0.0

    @property
    def safe(self) -> bool:
        return self.score is not None


Evaluate = Callable[[dict[str, Any]], TwinResult]


def unit(params: dict[str, Any], space: dict[str, BaseDistribution],
         names: list[str]) -> np.ndarray:
    """``params`` in the unit cube (log dimensions on a log scale)."""
    out = []
    for k in names:
        low, high, log = _bounds(space[k])
        x = float(params[k])
        if log:
            out.append((math.log(max(x, low)) - math.log(low)) / (math.log(high) - math.log(low)))
        else:
            out.append((x - low) / (high - low) if high > low else 0.0)
    return np.array(out)


# A guardrail no canary trial has a residual for: no correction, and unsure.
_UNKNOWN = (0.0, 0.1)


@dataclass(frozen=True)
class Local:
    """The correction at one point of the search space (``Correction.at``)."""

    score: tuple[float, float]  # (correction, its uncertainty)
    margins: dict[str, tuple[float, float]]  # per guardrail, likewise
    broke: float  # weighted share of broken limits nearby

    def violation(self, margins: dict[str, float], kappa: float) -> float:
        """The optimistic violation of a twin point with these ``margins``: each guardrail's
        margin corrected here, less ``kappa`` uncertainties; the positive parts summed."""
        total = 0.0
        for g, m in margins.items():
            c, u = self.margins.get(g, _UNKNOWN)
            total += max(m + c - kappa * u, 0.0)
        return total


@dataclass
class Correction:
    """Kernel-smoothed canary-minus-twin residuals and canary limit breaks (see step 3)."""

    points: np.ndarray  # (n, d) canary trials in the unit cube
    residuals: np.ndarray  # (n,) score residuals, NaN where the canary has no score
    margins: dict[str, np.ndarray]  # per guardrail: (n,) margin residuals, NaN likewise
    bad: np.ndarray  # (n,) 1.0 where the canary outcome broke a limit
    bandwidth: float
    prior: float = 1.0  # pseudo-observations of the mean residual / of a clean outcome

    def weights(self, x: np.ndarray) -> np.ndarray:
        return np.exp(-((self.points - x) ** 2).sum(axis=1) / (2 * self.bandwidth ** 2))

    def smooth(self, residuals: np.ndarray, w: np.ndarray) -> tuple[float, float]:
        """(correction, its uncertainty) at the point whose kernel weights are ``w``: the
        weighted residual, shrunk towards the residuals' mean; unsure where no canary trial is
        near."""
        known = ~np.isnan(residuals)
        r, wk = residuals[known], w[known]
        if len(r) == 0:
            return _UNKNOWN
        mean = float(r.sum() / (len(r) + self.prior))
        spread = max(float(np.std(r)) if len(r) > 1 else 0.1, 0.02)
        total = float(wk.sum())
        corr = (float((wk * r).sum()) + self.prior * mean) / (total + self.prior)
        return corr, spread * math.sqrt(self.prior / (total + self.prior))

    def at(self, x: np.ndarray) -> Local:
        """The score's and each guardrail's correction at ``x``, and the share of broken
        limits there."""
        if len(self.points) == 0:
            return Local(score=_UNKNOWN, margins={}, broke=0.0)
        w = self.weights(x)
        broke = float((w * self.bad).sum()) / (float(w.sum()) + self.prior)
        return Local(score=self.smooth(self.residuals, w),
                     margins={g: self.smooth(r, w) for g, r in self.margins.items()},
                     broke=broke)


class TwinSampler(optuna.samplers.BaseSampler):
    """The twin explores, the canary confirms (see the module docstring)."""

    def __init__(self, seed: int | None = None, *, twin_trials: int = 60, local: int = 2,
                 kappa: float = 1.0, step: float = 0.1) -> None:
        self.seed = seed
        self.twin_trials_planned = twin_trials
        self.local = local
        self.kappa = kappa
        self.step = step
        self._hc = HillClimbSampler(seed=seed)
        self._rng = np.random.RandomState(seed)
        self._evaluate: Evaluate | None = None
        self._knobs: Callable[[dict[str, Any]], dict[str, int]] | None = None
        self._pool: dict[tuple[tuple[str, Any], ...], tuple[dict[str, Any], TwinResult]] = {}
        self._explored = False
        self.twin_trials = 0  # twin measurements made (the canary budget does not count them)

    # Wiring ------------------------------------------------------------------------------
    def attach(self, evaluate: Evaluate,
               knobs: Callable[[dict[str, Any]], dict[str, int]] | None = None) -> None:
        """The twin: measures Optuna params on the twin (``TwinScreen.evaluate``); ``knobs``:
        the knob values params become (several params can round to the same settings, which
        the canary must not measure twice)."""
        self._evaluate = evaluate
        self._knobs = knobs

    def reseed_rng(self) -> None:
        self._rng.seed()
        self._hc.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._hc.infer_relative_search_space(study, trial)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._hc.sample_independent(study, trial, param_name, param_distribution)

    # The twin --------------------------------------------------------------------------------
    def twin(self, params: dict[str, Any]) -> TwinResult:
        """The twin's result for ``params`` (measured once, then kept in the pool)."""
        assert self._evaluate is not None
        key = tuple(sorted(params.items()))
        if key not in self._pool:
            self._pool[key] = (dict(params), self._evaluate(params))
            self.twin_trials += 1
        return self._pool[key][1]

    def explore(self, space: dict[str, BaseDistribution], seeds: list[dict[str, Any]]) -> None:
        """Step 1: a TPE study on the twin alone, seeded with the canary's known points."""
        self._explored = True
        if self.twin_trials_planned <= 0:
            return
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        inner = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(
            seed=self.seed, multivariate=True, n_startup_trials=min(20, self.twin_trials_planned),
            constraints_func=_inner_violation))
        for p in seeds:  # a known point outside the box (the baseline, often) is no seed
            if all(getattr(space.get(k), "low", v) <= v <= getattr(space.get(k), "high", v)
                   for k, v in p.items()):
                inner.enqueue_trial(p, skip_if_exists=True)
        for _ in range(self.twin_trials_planned):
            t = inner.ask(space)
            res = self.twin(t.params)
            # A storm is worse than any guardrail break: TPE ranks by the violation first.
            study_store.tag(t, violation=res.violation if res.safe else _STORM)
            inner.tell(t, res.score if res.safe else -1.0)

    def refine(self, space: dict[str, BaseDistribution], names: list[str],
               around: dict[str, Any]) -> None:
        """Step 2: ``local`` steps of one or two coordinates around ``around``."""
        base = unit(around, space, names)
        for _ in range(self.local):
            u = base.copy()
            for i in self._rng.choice(len(names), size=min(2, len(names)), replace=False):
                u[i] = min(max(u[i] + self._rng.normal() * self.step, 0.0), 1.0)
            params = {k: _from_unit(space[k], float(u[i])) for i, k in enumerate(names)}
            self.twin(params)

    def records(self) -> list[dict[str, Any]]:
        """Every twin trial, for the record (``twin/trials.json`` in the study's MLflow run)."""
        return [{"params": params, "score": res.score,
                 "violation": res.violation if res.safe else None, "margins": res.margins,
                 "safe": res.safe,
                 "feasible": res.safe and res.feasible} for params, res in self._pool.values()]

    # The proposal ----------------------------------------------------------------------------
    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self._evaluate is None or not search_space:
            return self._hc.sample_relative(study, trial, search_space)
        names = sorted(search_space)
        done = [t for t in _finished(study) if all(k in t.params for k in names)]
        if not self._explored:
            self.explore(search_space, [{k: t.params[k] for k in names} for t in done])
        anchor = self.anchor(done)
        if anchor is not None:
            self.refine(search_space, names, anchor.params)
        corr = self.correction(done, search_space, names)
        # Never again a point already tried in any way (a screened or refused one too, which
        # would be screened again), nor one another worker is measuring now.
        busy = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,
                                                                   TrialState.WAITING))
                if t.number != trial.number and all(k in t.params for k in names)]
        taken = np.array([unit(t.params, search_space, names) for t in (*done, *busy)]) \
            if done or busy else None
        taken_knobs = {self._knob_key(t.params) for t in (*done, *busy)}
        best: tuple[tuple[float, float, float], dict[str, Any]] | None = None
        for params, res in self._pool.values():
            if not res.safe:
                continue
            x = unit(params, search_space, names)
            if taken is not None and float(np.min(np.abs(taken - x).max(axis=1))) < 1e-3:
                continue
            if self._knobs is not None and self._knob_key(params) in taken_knobs:
                continue
            here = corr.at(x)
            # Safety first: a point whose neighbourhood mostly rolled back on the canary goes
            # last. Then feasibility (Deb's rule): a point likely to meet every guardrail beats
            # any that is not; among those, the optimistic score; among the rest, the smallest
            # optimistic violation.
            assert res.score is not None
            c, u = here.score
            key = (0.0 if here.broke < 0.5 else -here.broke,
                   -here.violation(res.margins, self.kappa), res.score + c + self.kappa * u)
            if best is None or key > best[0]:
                best = (key, params)
        if best is None:
            return self._hc.sample_relative(study, trial, search_space)
        return {k: _clip(search_space[k], best[1][k]) for k in names}

    def _knob_key(self, params: dict[str, Any]) -> tuple[tuple[str, int], ...] | None:
        """The settings ``params`` become (None without a ``knobs`` mapping)."""
        return tuple(sorted(self._knobs(params).items())) if self._knobs is not None else None

    def anchor(self, done: list[FrozenTrial]) -> FrozenTrial | None:
        """Where to refine: the canary's incumbent, or while nothing met every guardrail, the
        measured trial that came closest."""
        inc = self._hc.incumbent(done)
        if inc is not None:
            return inc
        scored = [t for t in done if t.state == TrialState.COMPLETE
                  and study_store.tags(t).score is not None]
        return min(scored, key=lambda t: (_violation(t), -t.number), default=None)

    def correction(self, done: list[FrozenTrial], space: dict[str, BaseDistribution],
                   names: list[str]) -> Correction:
        """Step 3 from the canary's finished trials (the twin measures any it has not)."""
        pts: list[np.ndarray] = []
        res: list[float] = []
        bad: list[float] = []
        rows: list[dict[str, float]] = []  # each trial's margin residuals
        for t in done:
            tags = study_store.tags(t)
            if tags.verdict.startswith(("rejected", "screened", "failed")):
                continue  # never measured on the canary, or not the setting's fault
            params = {k: t.params[k] for k in names}
            twin = self.twin(params)
            s = tags.score
            measured = s is not None and twin.safe and t.state == TrialState.COMPLETE
            pts.append(unit(params, space, names))
            res.append(float(s) - float(twin.score)
                       if measured and s is not None and twin.score is not None else math.nan)
            canary = optuna_io.constraints(t)
            rows.append({g: canary[g] - m for g, m in twin.margins.items() if g in canary}
                        if measured else {})
            bad.append(1.0 if tags.verdict.startswith(_BAD) else 0.0)
        guardrails = sorted({g for r in rows for g in r})
        margins = {g: np.array([r.get(g, math.nan) for r in rows]) for g in guardrails}
        d = len(names)
        return Correction(np.array(pts).reshape(-1, d), np.array(res), margins, np.array(bad),
                          bandwidth=0.15 * math.sqrt(d))


def _inner_violation(t: FrozenTrial) -> list[float]:
    """The twin study's constraint: the violation each twin trial is tagged with before tell."""
    v = study_store.tags(t).violation
    assert v is not None, f"twin trial {t.number} finished without its violation"
    return [float(v)]


def _violation(t: FrozenTrial) -> float:
    """A canary trial's guardrail violation (the sum of its positive constraint margins)."""
    return float(sum(max(float(v), 0.0) for v in optuna_io.constraints(t).values()))


def _from_unit(d: BaseDistribution, u: float) -> float | int:
    low, high, log = _bounds(d)
    x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if log \
        else low + u * (high - low)
    return _clip(d, x)


__all__ = ["Correction", "Local", "TwinResult", "TwinSampler", "unit"]
