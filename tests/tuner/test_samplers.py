"""The benchmark's alternative tuners (tuner/samplers.py): each test breaks if its rule goes."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner import optuna_io
from tuner.experiment import SamplerSpec
from tuner.samplers import EcnShifterSampler, HillClimbSampler

DISTS = {"kmin_bytes": IntDistribution(5_000, 4_000_000, log=True),
         "kmax_ratio": FloatDistribution(1.5, 20.0, log=True),
         "pmax_percent": IntDistribution(1, 100, log=True),
         "rpg_min_dec_fac": IntDistribution(1, 100)}
BASE = {"kmin_bytes": 1_048_576, "kmax_ratio": 2.0, "pmax_percent": 5, "rpg_min_dec_fac": 50}


def _add(study: optuna.Study, params: dict[str, Any], *, role: str = "proposal",
         verdict: str = "ok", score: float | None = 0.0, state: TrialState = TrialState.COMPLETE,
         constraints: dict[str, float] | None = None, **metrics: float) -> None:
    study.add_trial(create_trial(
        state=state, value=score if state == TrialState.COMPLETE else None, params=params,
        distributions=DISTS, constraints=constraints or {"busbw_floor": -0.5},
        user_attrs={"role": role, "verdict": verdict, "score": score, "metrics": metrics}))


def _ask(study: optuna.Study) -> dict[str, Any]:
    return optuna_io.ask(study, DISTS).params


def _study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _add(study, BASE, role="baseline", verdict="baseline")
    return study


# Hill climber ------------------------------------------------------------------------------
def test_hillclimb_moves_one_coordinate_of_the_best_feasible_completed_trial() -> None:
    study = _study(HillClimbSampler(seed=3))
    good = dict(BASE, kmin_bytes=200_000, kmax_ratio=4.0, pmax_percent=20, rpg_min_dec_fac=30)
    _add(study, good, score=0.5)
    # Better scores that must not become the incumbent: infeasible, and stopped early.
    _add(study, dict(BASE, kmin_bytes=20_000), score=0.9, constraints={"busbw_floor": 0.1})
    _add(study, dict(BASE, kmin_bytes=40_000), score=0.8, state=TrialState.PRUNED)
    moved = set()
    for _ in range(40):
        p = _ask(study)
        diff = [k for k in DISTS if p[k] != pytest.approx(good[k])]
        assert len(diff) == 1, (p, good)
        moved.add(diff[0])
    assert moved == set(DISTS)  # the coordinate is drawn at random, every one gets its turn


def test_hillclimb_follows_a_better_feasible_trial() -> None:
    study = _study(HillClimbSampler(seed=0))
    _add(study, dict(BASE, kmin_bytes=200_000), score=0.5)
    better = dict(BASE, kmin_bytes=30_000, pmax_percent=60)
    _add(study, better, score=0.6)
    p = _ask(study)
    assert sum(p[k] != pytest.approx(better[k]) for k in DISTS) == 1


def test_hillclimb_steps_in_log_space_on_a_log_dimension() -> None:
    sampler = HillClimbSampler(seed=1)
    study = _study(sampler)
    here = dict(BASE, kmin_bytes=140_000)  # the geometric middle of 5 kB..4 MB
    _add(study, here, score=0.5)
    ratios = []
    for _ in range(400):
        p = _ask(study)
        if p["kmin_bytes"] != here["kmin_bytes"]:
            ratios.append(p["kmin_bytes"] / here["kmin_bytes"])
    # Log steps (a quarter of ln(4 MB / 5 kB) = 1.67): symmetric in the ratio, and ~32 % within
    # a factor 2. A linear step of a quarter of the range (~1 MB) lands within a factor 2 of
    # 140 kB in ~8 % of the draws.
    within = sum(0.5 <= r <= 2 for r in ratios) / len(ratios)
    below = sum(r < 1 for r in ratios) / len(ratios)
    assert within > 0.2 and 0.35 < below < 0.65, (within, below)


def test_hillclimb_step_halves_without_progress() -> None:
    sampler = HillClimbSampler(seed=0, patience=2)
    study = _study(sampler)
    _add(study, dict(BASE, kmin_bytes=200_000), score=0.5)
    trials = study.get_trials()
    inc = sampler.incumbent(trials)
    assert inc is not None and inc.number == 1
    assert sampler.step_now(trials, inc, 4) == 0.25
    for _ in range(4):
        _add(study, dict(BASE, kmin_bytes=300_000), score=0.1)
    assert sampler.step_now(study.get_trials(), inc, 4) == 0.25 / 4


# ECN-window shifter ------------------------------------------------------------------------
def _shifter() -> tuple[optuna.Study, EcnShifterSampler]:
    s = EcnShifterSampler(seed=0, pfc_alarm_us_per_s=1000)
    study = optuna.create_study(direction="maximize", sampler=s)
    return study, s


def test_shifter_moves_the_window_down_on_pfc_and_keeps_everything_else() -> None:
    study, _ = _shifter()
    _add(study, BASE, role="baseline", verdict="baseline", pause_us_per_s=12_000,
         ecn_marked_pkts=10)
    _add(study, dict(BASE, kmin_bytes=150_000, pmax_percent=100), role="warm:spectrum-default",
         pause_us_per_s=0, ecn_marked_pkts=10)  # warm starts are not the shifter's chain
    p = _ask(study)
    assert p["kmin_bytes"] == BASE["kmin_bytes"] // 2
    assert {k: v for k, v in p.items() if k != "kmin_bytes"} == pytest.approx(
        {k: v for k, v in BASE.items() if k != "kmin_bytes"})


@pytest.mark.parametrize("verdict, metrics, direction", [
    ("ok", {"pause_us_per_s": 0.0, "ecn_marked_pkts": 500.0}, +1),  # ECN only: up
    ("ok", {"pause_us_per_s": 5000.0, "ecn_marked_pkts": 500.0}, -1),  # PFC alarm: down
    ("rolled_back:pfc_storm", {}, -1),
    ("rejected:kmax_above_pfc_threshold", {}, -1),  # never measured: no marks, down
    ("ok", {"pause_us_per_s": 0.0, "ecn_marked_pkts": 0.0}, -1),  # silent window: down
])
def test_shifter_rule(verdict: str, metrics: dict[str, float], direction: int) -> None:
    study, _ = _shifter()
    _add(study, BASE, role="baseline", verdict="baseline", pause_us_per_s=12_000)
    half = BASE["kmin_bytes"] // 2
    _add(study, dict(BASE, kmin_bytes=half), verdict=verdict, **metrics)
    p = _ask(study)
    # The baseline moved the window down by 2; a reversal halves the (log) step.
    factor = 2.0 if direction == -1 else math.sqrt(2.0)
    assert p["kmin_bytes"] == round(half * factor ** direction)


def test_shifter_step_shrinks_at_every_reversal_and_settles() -> None:
    study, s = _shifter()
    _add(study, BASE, role="baseline", verdict="baseline", pause_us_per_s=12_000)
    k = BASE["kmin_bytes"]
    for i in range(12):  # alternate PFC and ECN-only: the window closes in on a boundary
        k = _ask(study)["kmin_bytes"]
        study.tell(study.get_trials()[-1].number, state=TrialState.FAIL)
        alarm = i % 2 == 1
        _add(study, dict(BASE, kmin_bytes=k), pause_us_per_s=5000 if alarm else 0,
             ecn_marked_pkts=10)
    w = s.window([t for t in study.get_trials() if t.state != TrialState.FAIL])
    assert w is not None and w[1] == pytest.approx(math.log(1.05))


def test_make_sampler_selects_both() -> None:
    assert isinstance(optuna_io.make_sampler(SamplerSpec(name="hillclimb"), multi=False),
                      HillClimbSampler)
    s = optuna_io.make_sampler(SamplerSpec(name="ecn-shifter"), multi=True,
                               pfc_alarm_us_per_s=1500)
    assert isinstance(s, EcnShifterSampler) and s.alarm == 1500


# TPE with local start-up -------------------------------------------------------------------
def test_local_tpe_starts_with_hill_climb_steps_then_models_every_trial() -> None:
    from tuner.samplers import LocalStartTPESampler

    study = _study(LocalStartTPESampler(seed=1, startup=4))
    good = dict(BASE, kmin_bytes=200_000, kmax_ratio=4.0, pmax_percent=20, rpg_min_dec_fac=30)
    _add(study, good, score=0.5)
    for _ in range(2):  # proposals 3 and 4: hill-climb steps from the best feasible trial
        p = _ask(study)
        assert sum(p[k] != pytest.approx(good[k]) for k in DISTS) == 1, p
    moved = []
    for _ in range(4):  # then TPE: a draw from its model moves several coordinates at once
        p = _ask(study)
        moved.append(sum(p[k] != pytest.approx(good[k]) for k in DISTS))
    assert max(moved) >= 2, moved
    assert optuna_io.make_sampler(SamplerSpec(name="local-tpe", seed=0, startup_trials=6),
                                  False).startup == 6  # type: ignore[attr-defined]
