"""Two published-style tuners as Optuna samplers, for the search benchmark (``bench/search.py``).

Both only *propose*: every proposal still goes through the loop's static limits, guarded
change, live monitor, paired scoring and confirmation, so they compete with TPE on equal terms.
Both read the study's history from the trial user attrs the loop writes (``role``, ``verdict``,
``score``, ``metrics``) and keep no state of their own, so a resumed study continues where it
stopped.

* ``hillclimb`` -- random-coordinate hill climbing in the style of ByteTuning (ByteDance's ECN
  tuner): take the best feasible trial so far (the incumbent), change one randomly chosen
  searched coordinate by a Gaussian step (in log space where the dimension is log), and keep the
  result only if it beats the incumbent -- which is what "take the best feasible trial" does on
  the next proposal. The step (a quarter of the range) halves after every ``patience``
  proposals without a new incumbent.
* ``ecn-shifter`` -- a rule-based ECN-window shifter in the style of Juniper's CoS ECN
  auto-tuning: move the Kmin/Kmax window (same ratio) *down* after a PFC alarm -- the previous
  proposal rolled back (or was screened) or paused more than the alarm level -- and *up* when
  the previous proposal saw ECN marks without an alarm; a window that marked nothing moves down
  too (it sits above every queue the workload builds, or, rejected for a Kmax above the PFC
  onset, was never measured). The shift starts at a factor 2 and its log step halves at every
  change of direction, so the window settles at the boundary between "PFC" and "ECN only".
  Every other knob stays at the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.search_space import IntersectionSearchSpace
from optuna.trial import FrozenTrial, TrialState

from tuner import study_store

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _bounds(d: BaseDistribution) -> tuple[float, float, bool]:
    assert isinstance(d, IntDistribution | FloatDistribution)
    return float(d.low), float(d.high), bool(d.log)


def _clip(d: BaseDistribution, x: float) -> float | int:
    """``x`` inside ``d`` (rounded for an integer dimension)."""
    low, high, _ = _bounds(d)
    x = min(max(x, low), high)
    return int(round(x)) if isinstance(d, IntDistribution) else float(x)


def _finished(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=_FINISHED)
            if study_store.tags(t).verdict != "interrupted"]


def _feasible_score(t: FrozenTrial) -> float | None:
    """The paired scalar score of a completed trial that met every constraint, else None."""
    s = study_store.tags(t).score
    if t.state != TrialState.COMPLETE or s is None:
        return None
    if any(v > 0 for v in dict(t.constraints).values()):
        return None
    return float(s)


class _ProposingSampler(optuna.samplers.BaseSampler):
    """Shared plumbing: the relative search space is every dimension seen so far, and anything
    outside it (or any trial before there is history) is sampled at random."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.RandomState(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._space = IntersectionSearchSpace(include_pruned=True)

    def reseed_rng(self) -> None:
        self._rng.seed()
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._space.calculate(study)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


class HillClimbSampler(_ProposingSampler):
    """Random-coordinate hill climbing from the best feasible trial (see the module docstring)."""

    def __init__(self, seed: int | None = None, *, step: float = 0.25,
                 patience: int | None = None, min_step: float = 1 / 64) -> None:
        super().__init__(seed)
        self.step = step
        self.patience = patience
        self.min_step = min_step

    def incumbent(self, trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
        """The best feasible completed trial (the earliest among equals)."""
        best: tuple[float, int] | None = None
        out = None
        for t in trials:
            s = _feasible_score(t)
            if s is not None and (best is None or (s, -t.number) > best):
                best, out = (s, -t.number), t
        return out

    def step_now(self, trials: Sequence[FrozenTrial], inc: FrozenTrial, dims: int) -> float:
        """The current step (fraction of the range): halved per ``patience`` proposals since
        the incumbent was found."""
        since = sum(1 for t in trials if t.number > inc.number)
        patience = self.patience or max(dims, 1)
        return max(self.step * 0.5 ** (since // patience), self.min_step)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = _finished(study)
        inc = self.incumbent(trials)
        if inc is None or not all(k in inc.params for k in search_space):
            return {}  # nothing feasible yet: random proposals
        names = sorted(search_space)
        pick = names[self._rng.randint(len(names))]
        d = search_space[pick]
        low, high, log = _bounds(d)
        step = self.step_now(trials, inc, len(names))
        out: dict[str, Any] = {k: _clip(search_space[k], float(inc.params[k])) for k in names}
        x = float(inc.params[pick])
        for _ in range(8):  # a step that rounds back onto the incumbent's value is redrawn
            if log:
                y = math.exp(math.log(max(x, low)) + self._rng.normal() * step *
                             (math.log(high) - math.log(low)))
            else:
                y = x + self._rng.normal() * step * (high - low)
            new = _clip(d, y)
            if new != out[pick]:
                break
        out[pick] = new
        return out


class EcnShifterSampler(_ProposingSampler):
    """The rule-based ECN-window shifter (see the module docstring)."""

    def __init__(self, seed: int | None = None, *, pfc_alarm_us_per_s: float = 1000.0,
                 first_factor: float = 2.0, min_factor: float = 1.05) -> None:
        super().__init__(seed)
        self.alarm = pfc_alarm_us_per_s
        self.first_factor = first_factor
        self.min_factor = min_factor

    def direction(self, t: FrozenTrial) -> int:
        """-1 (window down) after a PFC alarm or a silent window, +1 after ECN marks only."""
        tags = study_store.tags(t)
        if tags.verdict.startswith(("rolled_back", "screened")):
            return -1
        m = tags.metrics
        if float(m.get("pause_us_per_s", 0.0)) > self.alarm:
            return -1
        if float(m.get("ecn_marked_pkts", 0.0)) > 0:
            return +1
        return -1

    def window(self, trials: Sequence[FrozenTrial]) -> tuple[float, float] | None:
        """(Kmin, log step) for the next proposal, replaying the rule over the history: the
        chain starts at the baseline and follows the shifter's own proposals."""
        chain = [t for t in trials if study_store.tags(t).role == "baseline"
                 and t.state == TrialState.COMPLETE][:1]
        chain += [t for t in trials if study_store.tags(t).role == "proposal"
                  and "kmin_bytes" in t.params]
        if not chain or "kmin_bytes" not in chain[0].params:
            return None
        step = math.log(self.first_factor)
        last = 0
        for t in chain:
            d = self.direction(t)
            if last and d != last:
                step = max(step / 2, math.log(self.min_factor))
            last = d
        kmin = float(chain[-1].params["kmin_bytes"]) * math.exp(last * step)
        return kmin, step

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if "kmin_bytes" not in search_space:
            return {}
        trials = _finished(study)
        base = next((t for t in trials if study_store.tags(t).role == "baseline"), None)
        w = self.window(trials)
        if base is None or w is None:
            return {}
        out = {k: _clip(d, float(base.params[k])) for k, d in search_space.items()
               if k in base.params}
        out["kmin_bytes"] = _clip(search_space["kmin_bytes"], w[0])
        return out


class LocalStartTPESampler(optuna.samplers.BaseSampler):
    """TPE whose start-up proposals are hill-climb steps from the best feasible trial so far
    (the baseline and the warm starts at first) instead of uniform random draws.

    Random start-up trials land where DCQCN cannot hold an incast most of the time (measured by
    bench/search.py: 53 % of TPE's proposals on quick.yaml, 80 % on moe-mix.yaml rolled back),
    and every one is a disturbed canary; steps around a known-good point rarely are. After
    ``startup`` proposals TPE (multivariate, constant liar) models every trial, these included.
    Which sampler proposes is decided by the proposals made so far (enqueued trials, the
    baseline and warm starts, do not count), so a resumed study continues the same way.
    """

    def __init__(self, seed: int | None = None, *, startup: int = 6) -> None:
        self.startup = startup
        self._hc = HillClimbSampler(seed=seed)
        self._tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=0,
                                               multivariate=True, constant_liar=True)

    def _pick(self, study: optuna.Study, trial: FrozenTrial) -> optuna.samplers.BaseSampler:
        proposals = sum(1 for t in study.get_trials(deepcopy=False)
                        if t.number < trial.number and not study_store.enqueued(t))
        return self._hc if proposals < self.startup else self._tpe

    def reseed_rng(self) -> None:
        self._hc.reseed_rng()
        self._tpe.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._pick(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._pick(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._pick(study, trial).sample_independent(study, trial, param_name,
                                                           param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._tpe.after_trial(study, trial, state, values)


__all__ = ["EcnShifterSampler", "HillClimbSampler", "LocalStartTPESampler"]
