"""The loop's early look at a trial ranks it exactly as the end's ``candidates`` will."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from tuner import optuna_io
from tuner import study as studies
from tuner.phases import trial as trial_phase


def _add(st: optuna.Study, score: float, objective: tuple[float, float],
         knob: int) -> None:
    st.add_trial(optuna.trial.create_trial(
        values=list(objective), user_attrs={"role": "proposal", "verdict": "ok",
                                             "values": {"kmin_kb": knob}, "score": score},
        constraints={"tenant": -1.0}))


def test_a_trial_on_the_pareto_front_heads_for_confirmation_over_a_higher_scalar(
        tmp_path: Path) -> None:
    """Multi mode, one confirmation slot: the standing candidate has the higher scalar score,
    the new trial dominates it on both objectives (busbw up, p99 down). ``candidates`` puts the
    new trial first (Pareto front first), so the early look must say it would be confirmed;
    a scalar-only rule (score 0.10 < 0.30) would say no."""
    st = optuna_io.create_study("m", f"sqlite:///{tmp_path / 'o.db'}",
                                ["maximize", "minimize"], optuna.samplers.RandomSampler(seed=0))
    _add(st, score=0.30, objective=(1.05, 0.90), knob=100)
    new = studies.TrialOutcome(number=1, state="COMPLETE", verdict="ok",
                               values={"kmin_kb": 200}, score=0.10, objective=(1.10, 0.80))
    assert studies.would_be_candidate(st, 1, new)
    _add(st, score=0.10, objective=(1.10, 0.80), knob=200)
    assert [o.values for o in studies.candidates(st, 1)] == [{"kmin_kb": 200}]
    # dominated and lower: not a candidate for the one slot; with two slots it is
    worse = studies.TrialOutcome(number=2, state="COMPLETE", verdict="ok",
                                 values={"kmin_kb": 300}, score=0.05, objective=(1.00, 0.95))
    assert not studies.would_be_candidate(st, 1, worse)
    assert studies.would_be_candidate(st, 3, worse)
    # a setting already measured adds nothing to confirm, and a guardrail broken is no candidate
    again = studies.TrialOutcome(number=3, state="COMPLETE", verdict="ok",
                                 values={"kmin_kb": 200}, score=0.01, objective=(1.0, 1.0))
    assert not studies.would_be_candidate(st, 5, again)
    broken = studies.TrialOutcome(number=4, state="COMPLETE", verdict="ok",
                                  values={"kmin_kb": 400}, score=0.9, objective=(2.0, 0.1),
                                  constraints={"tenant": 1.0})
    assert not studies.would_be_candidate(st, 5, broken)


def test_the_loop_asks_the_winner_policy_whether_to_intensify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``would_confirm`` (the trial phase) decides by ``would_be_candidate``: the dominating,
    lower-scalar trial above is measured on further placements."""
    st = optuna_io.create_study("m", f"sqlite:///{tmp_path / 'o.db'}",
                                ["maximize", "minimize"], optuna.samplers.RandomSampler(seed=0))
    _add(st, score=0.30, objective=(1.05, 0.90), knob=100)
    so_far = SimpleNamespace(feasible=True, scalar=0.10, values=(1.10, 0.80))
    monkeypatch.setattr(trial_phase, "score", lambda *_: so_far)
    ctx = SimpleNamespace(study=st, repeats=2, baseline_ms=[None] * 5, cfg=None, desc=None,
                          exp=SimpleNamespace(budget=SimpleNamespace(
                              candidate_placements=5, confirm_top_k=1)))
    asked = optuna_io.Asked(trial=None, number=1, params={})
    ms = [None, None]
    assert trial_phase.would_confirm(ctx, asked, {"kmin_kb": 200}, ms, "proposal")  # type: ignore[arg-type]
    so_far.values = (1.00, 0.95)  # dominated, and lower: the one slot stays the other's
    assert not trial_phase.would_confirm(ctx, asked, {"kmin_kb": 200}, ms, "proposal")  # type: ignore[arg-type]
