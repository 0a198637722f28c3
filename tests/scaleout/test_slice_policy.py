"""A worker runs the same phases as ``ecntune run`` under its ``SlicePolicy``: it measures its
slice's own trial 0 and searched trials, and only explores: the drift record, the confirmation
and the study report are one process's (``ecntune run``), not every worker's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.scaleout.test_storage import tiny_yaml
from tuner import optuna_io, study_store
from tuner import study as studies
from tuner.cli import main


def test_a_worker_explores_its_slice_and_leaves_drift_and_confirmation_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    f = tmp_path / "e.yaml"
    # a drift check after every trial and a confirmation of the best, were this `ecntune run`
    f.write_text(tiny_yaml(tmp_path / "res", db, trials=3)
                 .replace("canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 2}")
                 .replace("baseline_every: 0", "baseline_every: 1")
                 .replace("max_pfc_pause_us_per_s: 1000.0", "max_pfc_pause_us_per_s: 250.0"))
    alarms: list[float] = []
    made = optuna_io.make_sampler

    def spy(*a: Any, **kw: Any) -> Any:
        alarms.append(kw.get("pfc_alarm_us_per_s", 1000.0))
        return made(*a, **kw)

    monkeypatch.setattr(optuna_io, "make_sampler", spy)
    r = CliRunner().invoke(main, ["worker", str(f), "--slice", "sim1"])
    assert r.exit_code == 0, r.output
    assert alarms == [250.0]  # the ecn-shifter's PFC alarm is the experiment's guardrail

    study = optuna_io.load_study("tiny", db, None)
    tags = [study_store.tags(t) for t in optuna_io.trials(study)]
    assert [t.role for t in tags] == ["baseline", "proposal", "proposal", "proposal"]
    assert {t.slice for t in tags} == {"sim1"}
    assert study_store.baseline(study, "sim1")[0]  # the slice's own trial 0, stored ...
    assert study_store.baseline(study) == ([], None)  # ... and not as the study's (`run`'s)
    assert studies.candidates(study, 1)  # there was something to confirm ...
    assert studies.confirmation(study) is None  # ... and this worker left it alone
    assert study_store.info(study).drift == []
    assert not (tmp_path / "res" / "slices" / "sim1" / "tiny" / "confirmation").exists()


def test_resuming_a_study_only_workers_ran_measures_its_own_baseline(tmp_path: Path) -> None:
    """A worker's trial 0 is its slice's: ``ecntune resume`` (one process, its own canary)
    measures a baseline of its own and scores and confirms against that."""
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    f = tmp_path / "e.yaml"
    f.write_text(tiny_yaml(tmp_path / "res", db, trials=2)
                 .replace("canary: {switches: [leaf0]}", "canary: {switches: [leaf0], slices: 2}"))
    assert CliRunner().invoke(main, ["worker", str(f), "--slice", "sim1"]).exit_code == 0
    r = CliRunner().invoke(main, ["resume", "tiny", "--storage", db, "--trials", "3",
                                  "--no-mlflow", "--quiet"])
    assert r.exit_code == 0, r.output
    study = optuna_io.load_study("tiny", db, None)
    tags = [study_store.tags(t) for t in optuna_io.trials(study)]
    assert [(t.role, t.slice) for t in tags if t.role == "baseline"] == [
        ("baseline", "sim1"), ("baseline", None)]
    ms, _ = study_store.baseline(study)
    assert ms and ms != study_store.baseline(study, "sim1")[0]
