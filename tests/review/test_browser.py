"""End to end in a real browser: a short study into a results folder (SQLite MLflow store),
``ecntune ui`` started on it as a user would, and the printed MLflow runs page loaded in
headless Debian Chromium; the trial runs must be listed, and a trial's artifacts shown. The
screenshots are kept in ``tests/artifacts/``. Run with ``pytest -m browser``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.review.conftest import ROOT, free_port, quick_yaml, run_study
from tuner import optuna_io
from tuner.cli.ui import port_free

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # ~60 s: MLflow's UI in chromium
ARTIFACTS = ROOT / "tests" / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1400,1000", "--virtual-time-budget=15000"]


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found is None:
        pytest.skip("no chromium on PATH or at /usr/bin/chromium: apt-get install chromium "
                    "(.ci/run does) to run the browser tests")
    return found


def browse(chromium: str, url: str, profile: Path, *extra: str) -> str:
    """Load ``url`` once in a fresh headless Chromium; its stdout (the DOM with --dump-dom)."""
    if profile.exists():
        shutil.rmtree(profile)
    out = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_trial_runs_listed_in_the_mlflow_ui(chromium: str, tmp_path: Path,
                                            review_mlflow_template: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(review_mlflow_template, results / "mlflow.db")
    st = run_study("browser-study", quick_yaml(), results, f"sqlite:///{results / 'mlflow.db'}")
    trials = [t.number for t in optuna_io.trials(optuna_io.load_study(st.name, st.storage))]
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "tuner", "ui", str(results), "--port",
                           str(port), "--no-dashboard"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        assert ui.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while not any(x.startswith("  every trial as a row:") for x in lines):
            line = ui.stdout.readline()
            assert line or ui.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        text = "".join(lines)
        nested = re.search(r"MLflow UI: (\S+)", text)
        flat = re.search(r"every trial as a row: (\S+)", text)
        assert nested and flat, text
        assert nested.group(1).startswith(f"http://127.0.0.1:{port}/#/experiments/")

        dom = browse(chromium, flat.group(1), tmp_path / "p1", "--dump-dom")
        listed = sorted({int(n) for n in re.findall(r"trial-(\d{4})", dom)})
        assert listed == trials, f"trial runs in the page: {listed}, in Optuna: {trials}"
        assert st.name in dom
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "mlflow-runs.png"
        shot.unlink(missing_ok=True)
        browse(chromium, flat.group(1), tmp_path / "p2", f"--screenshot={shot}")
        assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000

        # the printed default address: the study row, its trials nested (collapsed) under it
        dom = browse(chromium, nested.group(1), tmp_path / "p3", "--dump-dom")
        assert st.name in dom
        m = re.search(r"<strong>(\d+)</strong> matching runs", dom)
        assert m and int(m.group(1)) == len(trials) + 1  # the parent run and every trial

        # a trial's artifacts in the UI: the baseline run's files, its time series shown
        base = f"http://127.0.0.1:{port}"
        exp_id = nested.group(1).split("/#/experiments/")[1].split("/")[0]
        req = urllib.request.Request(
            f"{base}/api/2.0/mlflow/runs/search", headers={"Content-Type": "application/json"},
            data=json.dumps({"experiment_ids": [exp_id],
                             "filter": "tags.`ecntune.trial` = '0'"}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            run_id = json.loads(r.read())["runs"][0]["info"]["run_id"]
        page = f"{base}/#/experiments/{exp_id}/runs/{run_id}/artifacts/timeseries.png"
        dom = browse(chromium, page, tmp_path / "p4", "--dump-dom")
        for name in ("trial-0000.json", "settings_diff.json", "counters_delta.json",
                     "timeseries.png", "raw"):
            assert f">{name}<" in dom, name
        art = ARTIFACTS / "mlflow-trial-artifacts.png"
        art.unlink(missing_ok=True)
        browse(chromium, page, tmp_path / "p5", f"--screenshot={art}")
        assert art.stat().st_size > 20_000
    finally:
        ui.send_signal(signal.SIGTERM)
        tail = ui.communicate(timeout=30)[0]
    assert ui.returncode == 0, tail
    assert "stopping" in tail
    assert port_free("127.0.0.1", port)  # the mlflow server went with it
