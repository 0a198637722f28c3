"""The loop's storm window decides verdicts (issue #20, item 8).

``StudyRunner`` sizes the storm detection window from the baseline
(``phases.baseline.window_for``: SONiC's 200 ms watchdog window scaled down to half the mean
baseline measurement) and hands it to the live monitor and to the post-hoc ``judge``. On
experiments/quick.yaml (baseline 10.526 ms of simulated time, window 5.263 ms):

- BURST (tests/tuner/trial_variants.py) pauses the incast senders in the first milliseconds
  only: host6, the worst, is paused 17.5 % of its worst 5.263 ms window (limit 50 %) but 63 %
  of a 1.316 ms one -- a window a quarter as long would roll it back;
- STORM keeps the senders paused ~66 % of every 5.263 ms window: the live monitor must stop it
  after the first whole window. Left at its 200 ms default (no window set from the baseline),
  no whole window ever fits in a 20 ms simulated measurement and the storm would run to the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trial_variants import BURST, STORM, quick_with

from objectives.measurement import Measurement
from safety.monitor import judge
from tuner import optuna_io
from tuner.cluster import build_cluster
from tuner.loop import StudyRunner


def _half_baseline_s(runner: StudyRunner) -> float:
    # the study's paired placements (the baseline holds more, for would-be candidates)
    return float(np.mean([m.duration_s for m in runner.baseline_ms[:runner.repeats]])) / 2


def _trial(exp_storage: str, study: str, number: int) -> tuple[dict, Measurement]:
    (t,) = [t for t in optuna_io.load_study(study, exp_storage).trials if t.number == number]
    m = Measurement.model_validate_json(Path(t.user_attrs["measurement_path"]).read_text())
    return t.user_attrs, m


def test_a_start_up_burst_shorter_than_the_window_is_not_rolled_back(tmp_path: Path) -> None:
    exp, text = quick_with(BURST, tmp_path)
    runner = StudyRunner(exp, text, build_cluster(exp), study_name="burst")
    res = runner.run()
    window = _half_baseline_s(runner)
    assert window == pytest.approx(0.005263)  # quick.yaml's baseline: 10.526 ms simulated
    (trial,) = [o for o in res.trials if not o.is_baseline]
    assert not trial.verdict.startswith("rolled_back"), trial.verdict
    assert trial.metrics["pause_us_per_s"] > 0  # it did pause: priced by the score, not fatal
    attrs, m = _trial(exp.storage_url, "burst", trial.number)
    assert not m.notes  # measured to the end: the live monitor did not abort it
    assert m.pause_series[-1][0] == pytest.approx(m.duration_s, abs=exp.safety.poll_interval_s)
    # The same samples, judged over the loop's window and over one a quarter as long: the
    # window's length is what keeps this trial.
    assert judge(m, exp.safety, window) == []
    short = judge(m, exp.safety, window / 4)
    assert [(v.code, v.target) for v in short] == [("pfc_storm", "host6/mlx5_0")]


def _assert_stopped_live_over_the_window(attrs: dict, m: Measurement, window: float,
                                         poll_s: float) -> None:
    assert attrs["verdict"] == "rolled_back:pfc_storm"
    assert f"of a {window * 1e3:g} ms window" in attrs["detail"]
    assert m.notes and m.notes[0].startswith("aborted by the live monitor: pfc_storm")
    # Stopped at the first poll that closes a whole window, not at the 20 ms time cap.
    assert window <= m.duration_s <= window + 2 * poll_s


def test_pausing_sustained_over_the_window_is_stopped_live(tmp_path: Path) -> None:
    exp, text = quick_with(STORM, tmp_path)
    runner = StudyRunner(exp, text, build_cluster(exp), study_name="storm")
    res = runner.run()
    window = _half_baseline_s(runner)
    (trial,) = [o for o in res.trials if not o.is_baseline]
    assert trial.verdict == "rolled_back:pfc_storm"
    attrs, m = _trial(exp.storage_url, "storm", trial.number)
    _assert_stopped_live_over_the_window(attrs, m, window, exp.safety.poll_interval_s)


def test_a_resumed_study_sizes_the_window_from_the_stored_baseline(tmp_path: Path) -> None:
    # On resume the baseline is not re-measured: the window comes from its stored replicates.
    exp, text = quick_with(STORM, tmp_path, trials=1)
    first = StudyRunner(exp, text, build_cluster(exp), study_name="resume")
    first.run()
    window = _half_baseline_s(first)
    exp2 = exp.model_copy(update={"budget": exp.budget.model_copy(update={"trials": 2})})
    res = StudyRunner(exp2, text, build_cluster(exp2), study_name="resume").run(resume=True)
    assert [o.number for o in res.trials] == [0, 1, 2]
    attrs, m = _trial(exp.storage_url, "resume", 2)
    _assert_stopped_live_over_the_window(attrs, m, window, exp.safety.poll_interval_s)
