"""``sampler: twin`` (tuner/twin_search.py): the twin explores, the canary confirms. Each test
breaks when its rule goes: the correction's arithmetic, the exploration on the twin, the canary
residuals re-ranking it, feasibility before score, the rolled-back neighbourhood, and never
proposing what the canary has measured or another worker is measuring."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner import optuna_io
from tuner.experiment import SamplerSpec
from tuner.samplers import HillClimbSampler
from tuner.twin_search import Correction, TwinResult, TwinSampler, unit

DISTS = {"kmin_bytes": IntDistribution(5_000, 4_000_000, log=True),
         "kmax_ratio": FloatDistribution(1.5, 20.0, log=True),
         "pmax_percent": IntDistribution(1, 100, log=True),
         "rpg_min_dec_fac": IntDistribution(1, 100)}
NAMES = sorted(DISTS)
BASE = {"kmin_bytes": 1_048_576, "kmax_ratio": 2.0, "pmax_percent": 5, "rpg_min_dec_fac": 50}
# Two corners of the unit cube, far apart: the twin's best (A) and its runner-up (B).
A = {"kmin_bytes": 20_000, "kmax_ratio": 3.0, "pmax_percent": 40, "rpg_min_dec_fac": 20}
B = {"kmin_bytes": 2_000_000, "kmax_ratio": 12.0, "pmax_percent": 2, "rpg_min_dec_fac": 90}


def _u(p: dict[str, Any]) -> np.ndarray:
    return unit(p, DISTS, NAMES)


def _near(p: dict[str, Any], q: dict[str, Any], tol: float = 0.05) -> bool:
    return float(np.abs(_u(p) - _u(q)).max()) < tol


def _peaks(a: float = 1.0, b: float = 0.9,
           violation: Callable[[np.ndarray], float] = lambda x: 0.0,
           tenant: Callable[[np.ndarray], float] = lambda x: -0.2) -> Callable[..., TwinResult]:
    """A twin with two peaks: ``a`` at A and ``b`` at B, falling off with distance. Its PFC
    margin is ``violation`` where that breaks the guardrail (-0.2 elsewhere); its tenant
    margin is ``tenant``."""
    ua, ub = _u(A), _u(B)

    def twin(params: dict[str, Any]) -> TwinResult:
        x = _u(params)
        s = max(a - 4 * float(((x - ua) ** 2).sum()), b - 4 * float(((x - ub) ** 2).sum()))
        v = violation(x)
        return TwinResult(score=s, margins={"pfc_pause": v if v > 0 else -0.2,
                                            "tenant_goodput": tenant(x)})

    return twin


def _study(sampler: TwinSampler, *points: dict[str, Any],
           baseline_violation: float = 0.0) -> optuna.Study:
    """A study with the baseline; the pool holds A, B and ``points`` (no exploration)."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _add(study, BASE, verdict="baseline", score=sampler.twin(BASE).score,
         constraints={"pfc_pause": baseline_violation})
    for p in (A, B, *points):
        sampler.twin(p)
    return study


def _add(study: optuna.Study, params: dict[str, Any], *, verdict: str = "ok",
         score: float | None = 0.0, state: TrialState = TrialState.COMPLETE,
         constraints: dict[str, float] | None = None) -> None:
    study.add_trial(create_trial(
        state=state, value=score if state == TrialState.COMPLETE else None, params=params,
        distributions=DISTS, constraints=constraints or {"pfc_pause": -0.5},
        user_attrs={"role": "proposal", "verdict": verdict, "score": score}))


def _sampler(twin: Callable[..., TwinResult], **kw: Any) -> TwinSampler:
    s = TwinSampler(seed=1, **{"twin_trials": 0, "local": 0, **kw})
    s.attach(twin)
    return s


def _ask(study: optuna.Study) -> dict[str, Any]:
    return optuna_io.ask(study, DISTS).params


# The correction's arithmetic --------------------------------------------------------------
def test_correction_is_the_kernel_weighted_residual_shrunk_to_the_mean() -> None:
    x0, far = np.zeros(2), np.ones(2) * 10
    c = Correction(points=np.array([x0]), residuals=np.array([-1.0]),
                   margins={"tenant_goodput": np.array([0.2])}, bad=np.array([1.0]),
                   bandwidth=0.3)
    here = c.at(x0)
    corr, unsure = here.score
    # weight 1 at the point, prior 1 of the mean residual -1 / (1 + 1) = -0.5
    assert corr == pytest.approx((-1.0 + -0.5) / 2)
    assert here.margins["tenant_goodput"][0] == pytest.approx((0.2 + 0.1) / 2)
    assert unsure == pytest.approx(0.1 * math.sqrt(1 / 2))  # one residual: spread 0.1
    assert here.broke == pytest.approx(1 / 2)
    # The optimistic violation: each margin corrected, less kappa uncertainties. A guardrail
    # the canary has no residual for is left as the twin says, and unsure.
    m, u = here.margins["tenant_goodput"]
    assert here.violation({"tenant_goodput": 0.1, "p99": 0.05}, kappa=1.0) == pytest.approx(
        0.1 + m - u)  # p99: 0.05 less its uncertainty 0.1 is met
    assert here.violation({"tenant_goodput": 0.1, "p99": 0.15}, kappa=0.0) == pytest.approx(
        0.1 + m + 0.15)
    far_here = c.at(far)
    assert far_here.score == pytest.approx((-0.5, 0.1))
    assert far_here.broke == pytest.approx(0.0)


def test_correction_without_canary_data_changes_nothing_and_is_unsure() -> None:
    c = Correction(points=np.zeros((0, 2)), residuals=np.zeros(0), margins={},
                   bad=np.zeros(0), bandwidth=0.3)
    here = c.at(np.zeros(2))
    assert here.score == (0.0, 0.1) and here.margins == {} and here.broke == 0.0
    assert here.violation({"tenant_goodput": 0.05}, kappa=1.0) == 0.0


# The proposal ----------------------------------------------------------------------------
def test_explores_the_twin_and_proposes_its_best_before_the_canary_has_spoken() -> None:
    s = TwinSampler(seed=1, twin_trials=120, local=0)
    s.attach(_peaks())
    study = optuna.create_study(direction="maximize", sampler=s)
    _add(study, BASE, verdict="baseline", score=0.0)
    p = _ask(study)
    assert s.twin_trials >= 120  # the exploration, plus the baseline seeded into it
    assert len(s.records()) == s.twin_trials
    # The twin's TPE climbs a peak (1.0 at A, 0.9 at B; a random point of the cube scores
    # about -1): the proposal is on one of them.
    score = _peaks()(p).score
    assert score is not None and score > 0.85, (p, score)


def test_canary_residuals_re_rank_the_twin() -> None:
    # kappa 0: no bonus for the unexplored, the correction alone re-ranks.
    study = _study(_sampler(_peaks(), kappa=0.0), dict(A, rpg_min_dec_fac=22))
    assert _near(_ask(study), dict(A, rpg_min_dec_fac=22))  # next to A: the twin's best
    study = _study(_sampler(_peaks(), kappa=0.0), dict(A, rpg_min_dec_fac=22))
    _add(study, A, score=0.1)  # the canary measured A: far below the twin's 1.0
    assert _near(_ask(study), B)  # A's neighbour inherits the residual; B is the better bet


def test_a_point_likely_to_meet_every_guardrail_beats_a_better_scoring_one() -> None:
    # The twin: A's corner breaks a guardrail (score 1.0), B's meets them all (0.9).
    twin = _peaks(violation=lambda x: 0.3 if float(np.abs(x - _u(A)).max()) < 0.2 else 0.0)
    study = _study(_sampler(twin))
    assert _near(_ask(study), B)


def test_the_canary_can_clear_a_guardrail_the_twin_breaks() -> None:
    # Every point breaks a guardrail on the twin; the canary measured A's neighbour within them.
    # (The baseline breaks it on the canary as on the twin: PFC pause over its budget.)
    twin = _peaks(a=0.5, b=0.9, violation=lambda x: 0.3)
    s = _sampler(twin, kappa=0.0)
    study = _study(s, dict(A, rpg_min_dec_fac=22), baseline_violation=0.3)
    _add(study, dict(A, rpg_min_dec_fac=19), score=0.5)
    assert _near(_ask(study), dict(A, rpg_min_dec_fac=22))
    # Without the canary's word, B scores higher at the same violation.
    study = _study(_sampler(twin, kappa=0.0), dict(A, rpg_min_dec_fac=22),
                   baseline_violation=0.3)
    assert _near(_ask(study), B)


def test_each_guardrail_is_corrected_on_its_own() -> None:
    # The canary's tenant goodput is worse than the twin's by about 0.25 wherever it measured
    # (near the baseline, far from A and B; PFC as the twin says). The twin's A (score 1.0)
    # meets the tenant guardrail by 0.05, B (0.9) by 0.6. One summed violation would carry the
    # tenant bias onto both alike and leave the higher score; corrected per guardrail, A is
    # predicted to break the tenant guardrail and B to meet it.
    twin = _peaks(tenant=lambda x: -0.05 if float(np.abs(x - _u(A)).max()) < 0.2 else -0.6)
    near_base = [dict(BASE, rpg_min_dec_fac=v) for v in (46, 48, 52, 54)]

    def study_of(measured: bool) -> optuna.Study:
        study = _study(_sampler(twin, kappa=0.0))
        for p in near_base if measured else []:
            tenant = twin(p).margins["tenant_goodput"] + 0.25
            _add(study, p, verdict="infeasible:tenant_goodput", score=0.0,
                 constraints={"pfc_pause": -0.2, "tenant_goodput": tenant})
        return study

    assert _near(_ask(study_of(measured=False)), A)  # the twin alone: the higher score
    assert _near(_ask(study_of(measured=True)), B)


def test_a_neighbourhood_that_rolled_back_on_the_canary_goes_last() -> None:
    study = _study(_sampler(_peaks()), dict(A, rpg_min_dec_fac=22), dict(A, rpg_min_dec_fac=25))
    _add(study, A, verdict="rolled_back:pfc_storm", score=None, state=TrialState.FAIL,
         constraints={"safety": 1.0})
    _add(study, dict(A, rpg_min_dec_fac=18), verdict="rolled_back:pfc_storm", score=None,
         state=TrialState.FAIL, constraints={"safety": 1.0})
    assert _near(_ask(study), B)


def test_a_guardrail_break_on_the_canary_is_corrected_not_banned_like_a_rollback() -> None:
    s = _sampler(_peaks())
    study = _study(s)
    _add(study, A, verdict="infeasible:tenant_goodput", score=1.0,
         constraints={"tenant_goodput": 0.05, "p99": -0.2})
    _add(study, B, verdict="rolled_back:pfc_storm", score=None, state=TrialState.FAIL,
         constraints={"safety": 1.0})
    corr = s.correction(list(study.get_trials()), DISTS, NAMES)
    assert corr.bad.tolist() == [0.0, 0.0, 1.0]  # only the storm counts as a broken limit
    # Each guardrail's residual, canary minus twin (the twin's tenant margin is -0.2 at A).
    assert corr.margins["tenant_goodput"][1] == pytest.approx(0.05 + 0.2)
    assert "p99" not in corr.margins  # the twin judged no p99 guardrail: nothing to correct
    assert math.isnan(corr.margins["tenant_goodput"][2]) and math.isnan(corr.residuals[2])


def test_never_proposes_what_the_canary_measured_or_another_worker_is_measuring() -> None:
    s = _sampler(_peaks())
    study = _study(s)
    _add(study, A, score=1.0)
    running = study.ask()  # another worker's trial, still on its canary slice
    for k, d in DISTS.items():
        running.suggest_float(k, d.low, d.high, log=d.log) if isinstance(d, FloatDistribution) \
            else running.suggest_int(k, d.low, d.high, log=d.log)
    busy = dict(running.params)
    s.twin(busy)
    p = _ask(study)
    assert not _near(p, A, 1e-3) and not _near(p, busy, 1e-3)


def test_never_proposes_params_that_round_to_settings_the_canary_measured() -> None:
    # A' is A with another rpg_min_dec_fac that the knob mapping rounds to A's settings
    # (the pool holds it, and the twin ranks it right after A).
    a2 = dict(A, rpg_min_dec_fac=21)
    s = TwinSampler(seed=1, twin_trials=0, local=0)
    s.attach(_peaks(), lambda p: {k: round(float(v), -1) if k == "rpg_min_dec_fac" else v
                                  for k, v in p.items()})
    study = _study(s, a2)
    _add(study, A, score=1.0)
    p = _ask(study)
    assert not _near(p, a2, 1e-3) and _near(p, B), p


def test_a_screened_point_is_not_proposed_again() -> None:
    study = _study(_sampler(_peaks()))
    _add(study, A, verdict="screened:busbw_loss", score=None, state=TrialState.FAIL,
         constraints={"screen": 10.0})
    assert _near(_ask(study), B)  # A was screened: asking for it again would loop


def test_storms_on_the_twin_are_never_proposed() -> None:
    def twin(params: dict[str, Any]) -> TwinResult:
        if _near(params, A):
            return TwinResult(score=None)
        return _peaks()(params)

    assert _near(_ask(_study(_sampler(twin))), B)


def test_without_a_twin_it_hill_climbs() -> None:
    def study_of(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        st = optuna.create_study(direction="maximize", sampler=sampler)
        _add(st, BASE, verdict="baseline", score=0.0)
        _add(st, A, score=0.5)
        return st

    assert _ask(study_of(TwinSampler(seed=4))) == _ask(study_of(HillClimbSampler(seed=4)))


def test_make_sampler_builds_it_with_the_experiments_twin_trials() -> None:
    s = optuna_io.make_sampler(SamplerSpec(name="twin", seed=2, twin_trials=40), multi=False)
    assert isinstance(s, TwinSampler) and s.twin_trials_planned == 40
    assert SamplerSpec().name == "twin"  # the default: the best measured (docs/benchmarks.md)
