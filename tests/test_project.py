"""Project-level guarantees: lint clean, our packages are imported, the CLI starts fast."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    res = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_is_clean() -> None:
    res = subprocess.run([sys.executable, "-m", "mypy", "tuner", "objectives", "safety",
                          "rocesim"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("package", ["tuner", "objectives", "safety", "rocesim"])
def test_top_level_packages_are_ours(package: str) -> None:
    # `safety` is also a popular vulnerability scanner on PyPI: make sure we import ours.
    mod = __import__(package)
    assert Path(mod.__file__).resolve().parent == ROOT / package


def test_cli_import_does_not_pull_heavy_dependencies() -> None:
    code = ("import sys, tuner.cli; heavy = [m for m in ('optuna', 'mlflow', 'paramiko') "
            "if m in sys.modules]; print(','.join(heavy))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == ""


def test_only_the_study_store_touches_optuna_attributes() -> None:
    """One module names, reads and writes the study's Optuna attributes (tuner.study_store);
    tuner.optuna_io only carries the dicts it builds to Optuna (#20 item 6)."""
    allowed = {ROOT / "tuner" / "study_store.py", ROOT / "tuner" / "optuna_io.py"}
    words = ("user_attrs", "set_user_attr", "system_attrs", "set_system_attr")
    found = [f"{path.relative_to(ROOT)}:{n}" for package in ("tuner", "objectives", "safety",
                                                            "rocesim", "experiments", "bench")
             for path in sorted((ROOT / package).rglob("*.py")) if path not in allowed
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if any(w in line for w in words)]
    assert not found, found
