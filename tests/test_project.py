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
