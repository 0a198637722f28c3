"""NAPALM-style pinned cases: ``cases/<parser>/<case named after the bug>/{input,expected}``.

``expected.json`` is matched as a subset of the parsed model (``model_dump(mode="json")``):
objects compare only the keys written down, lists must have the same length. A folder's parser
is ``objectives.parsers.parse_<folder>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from parser_refs import CASES

from objectives import parsers as P


def _case_dirs() -> list[Path]:
    return sorted(p.parent for p in CASES.glob("*/*/input.txt"))


def assert_subset(expected: Any, actual: Any, path: str = "$") -> None:
    """``expected`` is contained in ``actual`` (dict keys subset, lists same length)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}: missing key {key!r} (have {sorted(actual)})"
            assert_subset(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: expected a list, got {actual!r}"
        assert len(expected) == len(actual), (
            f"{path}: {len(actual)} items, expected {len(expected)}"
        )
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(e, a, f"{path}[{i}]")
    elif isinstance(expected, float) or isinstance(actual, float):
        assert actual == pytest.approx(expected, rel=1e-9), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def test_case_folders_exist() -> None:
    dirs = _case_dirs()
    assert len(dirs) >= 15
    for d in dirs:
        assert (d / "expected.json").is_file(), f"{d} has no expected.json"
        assert hasattr(P, f"parse_{d.parent.name}"), f"no parser for case folder {d.parent.name}"


@pytest.mark.parametrize("case", _case_dirs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_case(case: Path) -> None:
    parser = getattr(P, f"parse_{case.parent.name}")
    result = parser((case / "input.txt").read_text(encoding="utf-8"))
    expected = json.loads((case / "expected.json").read_text(encoding="utf-8"))
    assert_subset(expected, result.model_dump(mode="json"))


def test_subset_matcher_can_fail() -> None:
    with pytest.raises(AssertionError, match="missing key"):
        assert_subset({"a": 1}, {"b": 1})
    with pytest.raises(AssertionError, match="2 items"):
        assert_subset([1], [1, 2])
    with pytest.raises(AssertionError, match="!="):
        assert_subset({"a": {"b": 2.5}}, {"a": {"b": 2.6}})
