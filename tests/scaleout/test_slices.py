"""``canary.slices``: named disjoint slices, N identical simulated slices, and the experiment
one worker runs (its canary, its own folder, the shared storage and MLflow store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scaleout.test_storage import tiny_yaml
from tuner.errors import ConfigError
from tuner.experiment import parse_experiment
from tuner.slices import for_slice, slices


def exp_with(tmp: Path, decl: str):  # type: ignore[no-untyped-def]
    text = tiny_yaml(tmp / "res", f"sqlite:///{tmp / 'shared.db'}").replace(
        "canary: {switches: [leaf0]}", f"canary: {{switches: [leaf0], slices: {decl}}}")
    return parse_experiment(text, "e.yaml")


def test_n_identical_simulated_slices_each_with_its_own_folder(tmp_path: Path) -> None:
    exp = exp_with(tmp_path, "3")
    assert slices(exp) == {"sim0": ["leaf0"], "sim1": ["leaf0"], "sim2": ["leaf0"]}
    one = for_slice(exp, "sim1")
    assert one.canary.switches == ["leaf0"]
    assert one.results_path == tmp_path / "res" / "slices" / "sim1"
    assert one.storage_url == f"sqlite:///{tmp_path / 'shared.db'}"   # shared, not per slice
    assert one.tracking_uri == exp.tracking_uri


def test_named_slices_must_be_disjoint_and_known(tmp_path: Path) -> None:
    exp = exp_with(tmp_path, "{a: [leaf0], b: [leaf1]}")
    assert for_slice(exp, "b").canary.switches == ["leaf1"]
    with pytest.raises(ConfigError, match=r"--slice 'c': not a slice of tiny; it has: a, b"):
        for_slice(exp, "c")
    with pytest.raises(ConfigError, match="switch 'leaf0' is in both 'a' and 'b'"):
        slices(exp_with(tmp_path, "{a: [leaf0], b: [leaf0]}"))
    with pytest.raises(ConfigError, match=r"slice name 'a b'"):
        slices(exp_with(tmp_path, "{'a b': [leaf0]}"))
    with pytest.raises(ConfigError, match="use 1 to 64"):
        slices(exp_with(tmp_path, "0"))
    with pytest.raises(ConfigError, match="declare canary.slices"):
        for_slice(exp_with(tmp_path, "null"), "sim0")
