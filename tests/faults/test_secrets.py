"""A planted secret is found nowhere: secrets in every experiment field that can hold one, a
real study with MLflow on (then ``resume``, ``show`` and ``report``), and every byte the tool
wrote -- Optuna and MLflow stores, artifacts, reports, journal, console -- searched for them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.faults.conftest import ECNTUNE, sim_experiment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SECRETS = {
    "storage": "Sx7storagePW",
    "tracking.uri": "Sx7trackingPW",
    "description": "Sx7descriptionPW",
    "description query": "Sx7queryTOKEN",
}


def plant(exp: Path, results: Path) -> None:
    """Secrets where the tool accepts them and must hide them: URLs in free text."""
    text = exp.read_text().replace("tracking: {enabled: false}", (
        f"tracking: {{enabled: true, uri: 'sqlite:///{results}/mlflow.db'}}"))
    text += (f"storage: 'sqlite:///{results}/optuna.db'\n"
             f"description: >\n  mirror at https://ops:{SECRETS['description']}@db.example/x"
             f" and http://10.0.0.1/?api_key={SECRETS['description query']}\n")
    exp.write_text(text)


def test_planted_secret_found_nowhere(tmp_path: Path, reliability) -> None:
    exp = sim_experiment(tmp_path, trials=2, iterations=3)
    results = tmp_path / "results"
    plant(exp, results)
    outputs = []
    for args in (["run", str(exp)], ["resume", "--results", str(results), "--trials", "3"],
                 ["show", str(results)], ["report", str(results)]):
        res = subprocess.run([*ECNTUNE, *args], capture_output=True, text=True, cwd=tmp_path,
                             timeout=300)
        assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-2000:])
        outputs.append(res.stdout + res.stderr)
    # Passwords in the storage and tracking URLs are refused outright (they belong in
    # PGPASSWORD / MLFLOW_TRACKING_PASSWORD), and the refusal must not echo them either.
    bad = tmp_path / "bad.yaml"
    refusals = {
        f"storage: 'sqlite:///{results}/optuna.db'":
            (f"storage: 'sqlite://ecntune:{SECRETS['storage']}@/{results}/optuna.db'",
             "PGPASSWORD"),
        f"storage: 'sqlite:///{results}/optuna.db'\n":
            (f"storage: 'mysql://ecntune:{SECRETS['storage']}@db/x'\n",
             "use sqlite:///PATH"),
        f"uri: 'sqlite:///{results}/mlflow.db'":
            (f"uri: 'sqlite://ml:{SECRETS['tracking.uri']}@/{results}/mlflow.db'",
             "MLFLOW_TRACKING_PASSWORD")}
    for clean, (dirty, says) in refusals.items():
        bad.write_text(exp.read_text().replace(clean, dirty))
        res = subprocess.run([*ECNTUNE, "run", str(bad)], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
        assert res.returncode == 2 and says in res.stderr, (dirty, res.stderr)
        outputs.append(res.stdout + res.stderr)

    files = [p for p in tmp_path.rglob("*") if p.is_file() and p not in (exp, bad)]
    assert any(p.name == "mlflow.db" for p in files) and any("mlartifacts" in p.parts
                                                             for p in files)
    assert any(p.name == "experiment.yaml" for p in files)
    found = {label: [str(p.relative_to(tmp_path)) for p in files
                     if secret.encode() in p.read_bytes()]
             + [f"console of command {i}" for i, out in enumerate(outputs) if secret in out]
             for label, secret in SECRETS.items()}
    assert found == {label: [] for label in SECRETS}, found
    stored = next(p for p in files if p.name == "experiment.yaml").read_text()
    assert "<redacted>" in stored
    reliability.record(f"secrets planted in {len(SECRETS)} places of the experiment (storage "
                       "and tracking URL passwords, URLs in free text, a secret query "
                       "parameter); study with MLflow, resume, show, report",
                       f"none of them in any of the {len(files)} files written (Optuna and "
                       "MLflow stores, artifacts, reports, journal) nor on the console; a "
                       "password in a storage or tracking URL is refused (exit 2) without "
                       "being echoed",
                       dirty_targets=0, trials_lost=0, restore_s=None)
