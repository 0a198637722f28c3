"""Hostile and broken input: every file in ``files/`` is named after what is wrong with it and
starts with ``# expect: a | b | ...`` -- the field and the fix its error message must name.

Each one goes through ``ecntune run`` (the command that would change the canary) and
``ecntune preflight``, and must give
exit code 2, a short message naming the file, with every expected piece, no traceback, and no
change anywhere: no journal, no device state, no Optuna or MLflow store in the results folder.
The SSH cases point at loopback addresses where nothing listens (127.0.10.25x).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main

FILES = sorted((Path(__file__).parent / "files").glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    first = path.read_bytes().splitlines()[0].decode()  # some files are not UTF-8 on purpose
    assert first.startswith("# expect: "), f"{path.name} lacks its '# expect:' line"
    return [e.strip() for e in first.removeprefix("# expect: ").split(" | ")]


def test_there_are_at_least_sixty_cases() -> None:
    assert len(FILES) >= 60
    assert len({p.stem for p in FILES}) == len(FILES)


@pytest.mark.parametrize("command", ["run", "preflight"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_malformed_file_exits_2_naming_file_field_and_fix(
        path: Path, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request) -> None:
    monkeypatch.chdir(path.parent)  # relative inventory_file paths resolve next to the file
    results = tmp_path / "results"
    text = path.read_bytes()
    if command == "preflight" and b"results_dir" not in text and \
            b"expected a mapping" not in text.splitlines()[0]:
        # preflight has no --results: point results_dir (appended last, so line numbers stay)
        # at the folder that must stay empty, instead of ./results next to the files
        path = tmp_path / path.name
        path.write_bytes(text + f"results_dir: {results}\n".encode())
    t0 = time.monotonic()
    args = ["run", str(path), "--results", str(results), "--quiet", "--no-mlflow"] \
        if command == "run" else ["preflight", str(path)]
    res = CliRunner().invoke(main, args)
    elapsed = time.monotonic() - t0
    err = res.stderr
    assert res.exit_code == 2, (res.exit_code, err, res.stdout, res.exception)
    assert "Traceback" not in err + res.stdout
    assert path.name in err, err
    for piece in expectations(path):
        assert piece in err, f"{piece!r} missing from: {err}"
    assert len(err) < 1200 and len(err.splitlines()) <= 6, err
    # the results-folder lock (safety/lock.py: pid, host, command) is the one file allowed:
    # `run` takes it before it builds the backend, which reads the inventory
    touched = sorted(p.name for p in results.rglob("*") if p.name != "ecntune.lock") \
        if results.exists() else []
    assert touched == [], f"{path.name} left {touched}"
    request.node.user_properties.append(("elapsed_s", round(elapsed, 3)))
