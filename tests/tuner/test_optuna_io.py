"""The Optuna edge: sampler choice checked up front, study order, the stale-trial janitor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import optuna
import pytest

from tuner import optuna_io
from tuner.errors import ConfigError
from tuner.experiment import SamplerSpec


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch installed")
def test_gp_without_torch_fails_before_the_study() -> None:
    with pytest.raises(ConfigError, match="sampler.name: value 'gp' -- GPSampler needs torch"):
        optuna_io.make_sampler(SamplerSpec(name="gp"), multi=False)


def test_cmaes_is_single_objective_only() -> None:
    with pytest.raises(ConfigError, match="CMA-ES is single-objective"):
        optuna_io.make_sampler(SamplerSpec(name="cmaes"), multi=True)


def test_tpe_is_multivariate_with_constant_liar() -> None:
    s = optuna_io.make_sampler(SamplerSpec(name="tpe", seed=1, startup_trials=3), multi=False)
    assert isinstance(s, optuna.samplers.TPESampler)
    assert s._multivariate and s._constant_liar and s._n_startup_trials == 3


def test_study_names_newest_last_and_duplicate_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    for i, name in enumerate(["b", "a"]):
        st = optuna_io.create_study(name, url, ["maximize"], optuna.samplers.RandomSampler())
        st.set_user_attr("created_at", float(i))
    assert optuna_io.study_names(url) == ["b", "a"]
    with pytest.raises(ConfigError, match="ecntune resume a"):
        optuna_io.create_study("a", url, ["maximize"], optuna.samplers.RandomSampler())
    with pytest.raises(ConfigError, match="no study 'c'.*it has: b, a"):
        optuna_io.load_study("c", url)


def test_fail_stale_closes_running_trials_as_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    st = optuna_io.create_study("s", url, ["maximize"], optuna.samplers.RandomSampler())
    st.ask()  # a trial a killed process (of a version that recorded no owner) never told
    st.tell(st.ask(), 1.0)
    assert optuna_io.fail_stale(st) == ([0], [])
    t0, t1 = st.trials
    assert (t0.state.name, t0.user_attrs["verdict"]) == ("FAIL", "interrupted")
    assert t1.state.name == "COMPLETE"


def test_fail_stale_leaves_a_live_owners_trial_alone(tmp_path: Path) -> None:
    """Red team M2: resume on a shared PostgreSQL study closed a live run's RUNNING trial, and
    the live run died with UpdateFinishedTrialError. Only a provably gone owner's is closed."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'o.db'}"
    st = optuna_io.create_study("s", url, ["maximize"], optuna.samplers.RandomSampler())
    dists = {"x": optuna.distributions.FloatDistribution(0, 1)}
    live = optuna_io.ask(st, dists)  # this process: alive
    other = optuna_io.ask(st, dists)
    st._storage.set_trial_user_attr(other.trial._trial_id, "owner",
                                    dict(optuna_io.process_owner(), host="elsewhere"))
    gone = optuna_io.ask(st, dists)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = optuna_io.process_owner(child.pid)
    child.wait()  # started, recorded, now gone
    st._storage.set_trial_user_attr(gone.trial._trial_id, "owner", owner)
    reused = optuna_io.ask(st, dists)  # the pid now belongs to a process started later
    st._storage.set_trial_user_attr(reused.trial._trial_id, "owner",
                                    dict(optuna_io.process_owner(), start=1))
    closed, alive = optuna_io.fail_stale(st)
    assert closed == [gone.number, reused.number]
    assert alive == [live.number, other.number]
    assert st.trials[live.number].state.name == "RUNNING"


def test_an_owner_in_another_pid_namespace_is_never_judged_gone() -> None:
    """Red team H4: a pid this process cannot see is not a dead one when its owner lives in
    another PID namespace (a container on this host): only the same namespace proves it."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = optuna_io.process_owner(child.pid)
    child.wait()
    assert optuna_io.owner_gone(owner)  # same namespace, pid gone: proved
    assert not optuna_io.owner_gone(dict(owner, ns="pid:[1]"))
