"""A backend that cannot be built names the experiment file it came from, in every command
that builds one (``build_cluster(exp, source)``: run, worker, preflight, diagnose, calibrate and
recover pass it; worker and recover need a study or a journal first and are not run here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.cluster import build_cluster
from tuner.errors import ConfigError
from tuner.experiment import load_experiment

EMULATED = Path(__file__).resolve().parents[2] / "experiments" / "emulated-ssh.yaml"
UNSET = ("fabric.inventory_file: '${ECNTUNE_EMU_ROOT}/inventory.yaml' uses an unset "
         "environment variable")


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The emulated-cluster experiment, copied, with its inventory's variable unset."""
    monkeypatch.delenv("ECNTUNE_EMU_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)  # its results folder is relative
    return Path(shutil.copy(EMULATED, tmp_path / "lab.yaml"))


def test_the_error_names_the_source_when_given(lab: Path) -> None:
    exp = load_experiment(lab)
    with pytest.raises(ConfigError) as named:
        build_cluster(exp, str(lab))
    assert str(named.value) == f"{lab}: {UNSET}"
    with pytest.raises(ConfigError) as bare:  # library callers keep the backend's own text
        build_cluster(exp)
    assert str(bare.value) == UNSET


@pytest.mark.parametrize("command", ["run", "preflight", "diagnose", "calibrate"])
def test_commands_name_the_experiment_file(lab: Path, command: str) -> None:
    if command == "calibrate":  # it builds the twin first, then the canary's backend
        r = CliRunner().invoke(main, [command, str(lab)])
        assert r.exit_code == 2, r.output
        assert f"{lab}: screen.fabric: required with fabric.backend ssh" in r.output
        with lab.open("a") as f:
            f.write("screen:\n  fabric:\n    backend: sim\n"
                    "    topology: {kind: leaf_spine, leaves: 2, spines: 1, hosts_per_leaf: 2}\n")
    r = CliRunner().invoke(main, [command, str(lab)])
    assert r.exit_code == 2, r.output
    assert f"{lab}: {UNSET}" in r.output
