"""The study store: every attribute ecntune keeps in Optuna, typed, on a real SQLite study."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from objectives.measurement import LatencyResult, Measurement
from tuner import optuna_io, study_store


def _study(tmp_path: Path, name: str = "s") -> optuna.Study:
    return optuna_io.create_study(name, f"sqlite:///{tmp_path / 'o.db'}", ["maximize"],
                                  optuna.samplers.RandomSampler(seed=0))


def test_a_misspelt_attribute_is_an_error_not_a_silent_write(tmp_path: Path) -> None:
    st = _study(tmp_path)
    with pytest.raises(KeyError, match="not a study attribute: kept"):
        study_store.record(st, kept=3)
    asked = optuna_io.ask(st, {"x": optuna.distributions.IntDistribution(0, 9)})
    with pytest.raises(KeyError, match="not a trial tag: verdic"):
        study_store.tag(asked.trial, verdic="ok")
    with pytest.raises(KeyError, match="not a twin-trial counter"):
        study_store.count_twin_trials(st, "twin", 3)
    assert st.user_attrs == {}


def test_what_is_written_reads_back_typed_from_the_storage(tmp_path: Path) -> None:
    st = _study(tmp_path)
    study_store.created(st, experiment_yaml="name: q\n", mode="multi", trials_budget=40)
    study_store.record(st, kept_trial=7, canary={"switches": ["leaf0"], "nics": []})
    study_store.append_drift(st, {"after_trial": 5, "score": 0.1})
    study_store.append_drift(st, {"after_trial": 10, "score": -0.2})
    dists = {"x": optuna.distributions.IntDistribution(0, 9)}
    optuna_io.enqueue(st, {"x": 3}, "warm:vendor")
    asked = optuna_io.ask(st, dists)
    optuna_io.tell(st, asked, state=optuna_io.COMPLETE, values=(1.0,),
                   attrs=study_store.trial_attrs(verdict="ok", values={"x": 3},
                                                 metrics={"p99_us": 9.5}, score=0.25))
    m = Measurement(latency=LatencyResult(count=3, p50_us=1.0, p99_us=2.0, p999_us=3.0,
                                          max_us=4.0))
    study_store.save_baseline(st, [m, m], 2, noise={"score_sd": 0.01})
    study_store.save_baseline(st, [m], 1, "rack2")
    study_store.count_twin_trials(st, "twin_trials:rack1:a", 30)
    study_store.count_twin_trials(st, "twin_trials:rack2:b", 12)

    again = optuna_io.load_study("s", f"sqlite:///{tmp_path / 'o.db'}")
    info = study_store.info(again)
    assert (info.mode, info.trials_budget, info.kept_trial) == ("multi", 40, 7)
    assert info.created_at > 0 and info.canary["switches"] == ["leaf0"]
    assert [d["after_trial"] for d in info.drift] == [5, 10]
    assert info.noise == {"score_sd": 0.01} and info.repeats == 2
    [t] = optuna_io.trials(again)
    tags = study_store.tags(t)
    assert (tags.role, tags.verdict, tags.score, tags.values) == ("warm:vendor", "ok", 0.25,
                                                                   {"x": 3})
    assert tags.owner is not None and tags.owner["pid"] > 0  # who ran it: the janitor's proof
    assert study_store.enqueued(t)
    ms, reps = study_store.baseline(again)
    assert reps == 2 and [x.latency for x in ms] == [m.latency, m.latency]
    ms, reps = study_store.baseline(again, "rack2")
    assert reps == 1 and len(ms) == 1
    assert study_store.baseline(again, "rack3") == ([], None)
    assert study_store.twin_trials(again) == 42
