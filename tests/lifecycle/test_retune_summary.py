"""The re-tune summary from a study's paired confirmation (a small in-memory Optuna study):
"recovered" is the new winner against the old winner on the same replicates."""

from __future__ import annotations

import optuna
import pytest

from objectives.score import equivalent_percent
from tuner.lifecycle.retune import OLD_WINNER, summarize


def _study(old_role: str | None, old_diffs: list[float], new_diffs: list[float]) -> object:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(study_name="moe-2", direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    roles = ["baseline", old_role or "proposal", "proposal"]
    for i, role in enumerate(roles):
        st.add_trial(optuna.trial.create_trial(
            params={"x": i / 10}, distributions=dist, value=float(i),
            user_attrs={"role": role, "values": {"kmin_bytes": 1000 * (i + 1)},
                        "verdict": "ok",
                        "metrics": {"busbw_norm": 0.2 + i / 10, "p99_us": 50.0 - i}}))
    checks = [
        {"trial": 1, "diffs": old_diffs, "improvement_percent": 1.0, "ci95_low": -1.0,
         "ci95_high": 3.0, "problem": "", "confirmed": False},
        {"trial": 2, "diffs": new_diffs, "improvement_percent": 41.0, "ci95_low": 30.0,
         "ci95_high": 52.0, "problem": "", "confirmed": True}]
    st.set_user_attr("confirmation", {"candidates": checks, "paired_repeats": 4, "winner": 2})
    st.set_user_attr("lineage", {"retuned_from": "nc-1"})
    return st


def test_recovered_is_paired_on_the_replicates() -> None:
    s = summarize(_study(f"warm:{OLD_WINNER}", [0.1, 0.2, 0.0, 0.1], [0.5, 0.6, 0.4, 0.5]))
    assert (s.old_trial, s.new_trial, s.pairs) == (1, 2, 4)
    assert s.recovered_percent == pytest.approx(equivalent_percent(0.4))  # every pair 0.4
    assert s.recovered_ci == pytest.approx((equivalent_percent(0.4),) * 2)
    text = "\n".join(s.lines())
    assert "re-tune of study nc-1 as moe-2" in text
    assert "old choice on the new mix (trial 1): busbw/line 0.300, probe p99 49 us" in text
    assert f"recovered by the re-tune (new winner vs old winner, same replicates): " \
           f"{equivalent_percent(0.4):+.1f} %" in text
    assert s.metrics()["retune_recovered_percent"] == pytest.approx(equivalent_percent(0.4))


def test_noise_shared_by_both_arms_cancels() -> None:
    """Replicate-to-replicate swings that hit both arms alike do not widen the interval."""
    swing = [0.3, -0.2, 0.5, -0.4]
    s = summarize(_study(f"warm:{OLD_WINNER}", [0.1 + w for w in swing],
                         [0.3 + w for w in swing]))
    lo, hi = s.recovered_ci or (0, 0)
    assert hi - lo == pytest.approx(0.0, abs=1e-9)


def test_old_choice_deployed_is_trial_zero() -> None:
    s = summarize(_study(None, [0.1, 0.2], [0.5, 0.6, 0.4, 0.5]))
    assert s.old_trial is None and s.pairs == 4  # recovered = the winner's own paired gain
    assert "it is what runs now (trial 0, the baseline): busbw/line 0.200" in s.lines()[1]
