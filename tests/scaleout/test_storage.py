"""``storage: postgresql://...``: credentials from the environment or ~/.pgpass, never from the
experiment file and never in a message, log or record; a study runs on it; and the ask/tell
janitor fails a dead worker's trial and re-queues its params (Optuna's heartbeat)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from tests.scaleout.pg import PgServer
from tests.tuner.conftest import TINY_YAML
from tuner import optuna_io
from tuner.cli import main
from tuner.errors import ConfigError

SECRET = "s3cr3t-" + uuid.uuid4().hex[:8]


def tiny_yaml(results: Path, storage: str, trials: int = 2) -> str:
    text = TINY_YAML.format(trials=trials, max_pause_fraction=1.0, xoff_margin=20.0, seed=0,
                            results=results, buffer_bytes=12 * 2**20, kmin_low=5000,
                            kmin_high=10**6, ratio_low=1.5, ratio_high=10.0, pmax_low=1,
                            pmax_high=100, ai_low=1, ai_high=200, mode="primary", repeats=1,
                            warm="false", confirm=5, top_k=1, pfc_budget=1000.0,
                            tenant_loss=100.0, p99_allowance=1e6, placements=0)
    return text + f"storage: {storage}\ntracking: {{enabled: false}}\n"


@pytest.fixture
def role(pg_server: PgServer, pg_url: str) -> Iterator[tuple[str, str]]:
    """A login role with a password that owns the fresh database; (role, TCP URL without the
    password). Over TCP the server asks for the password (scram-sha-256)."""
    name = f"ecn_{uuid.uuid4().hex[:8]}"
    db = urlsplit(pg_url).path.strip("/")
    pg_server.sql(f"CREATE ROLE {name} LOGIN PASSWORD '{SECRET}'")
    pg_server.sql(f'ALTER DATABASE "{db}" OWNER TO {name}')
    try:
        yield name, f"postgresql://{name}@{pg_server.tcp_host}:{pg_server.tcp_port}/{db}"
    finally:
        for st in optuna_io._STORAGES.values():
            st.engine.dispose()
        optuna_io._STORAGES.clear()
        pg_server.sql(f'ALTER DATABASE "{db}" OWNER TO CURRENT_USER')
        pg_server.sql(f"DROP OWNED BY {name}", db=db)
        pg_server.sql(f"DROP ROLE IF EXISTS {name}")


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No PGPASSWORD, a HOME without .pgpass; returns that HOME."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("PGPASSWORD", "PGPASSFILE", "PGUSER", "PGSERVICE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    optuna_io._STORAGES.clear()
    return home


def test_password_in_the_experiment_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(tiny_yaml(tmp_path / "r", f"postgresql://ecn:{SECRET}@db.example/ecntune"))
    r = CliRunner().invoke(main, ["run", str(f)])
    assert r.exit_code == 2, r.output
    assert "storage: value 'postgresql://ecn:***@db.example/ecntune'" in r.output
    assert "PGPASSWORD or ~/.pgpass" in r.output
    assert SECRET not in r.output and "Traceback" not in r.output
    f.write_text(tiny_yaml(tmp_path / "r", f"postgresql://db.example/x?password={SECRET}"))
    r = CliRunner().invoke(main, ["run", str(f)])
    assert r.exit_code == 2 and "password=***" in r.output and SECRET not in r.output
    r = CliRunner().invoke(main, ["show", "--storage", f"postgresql://u:{SECRET}@h/d"])
    assert r.exit_code == 2 and SECRET not in r.output and "u:***@h" in r.output


def test_credentials_come_from_pgpassword_or_pgpass(role: tuple[str, str],
                                                    no_credentials: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna.samplers import RandomSampler

    name, url = role
    with pytest.raises(ConfigError, match=r"storage postgresql://ecn_\w+@127\.0\.0\.1:\d+/\w+: "
                                          r"cannot open it: .*(password|authentication)"):
        optuna_io.create_study("s", url, ["maximize"], RandomSampler())
    monkeypatch.setenv("PGPASSWORD", SECRET)
    optuna_io.create_study("s", url, ["maximize"], RandomSampler())
    monkeypatch.delenv("PGPASSWORD")
    optuna_io._STORAGES.clear()
    host, port, db = url.split("@")[1].replace("/", ":").split(":")
    pgpass = no_credentials / ".pgpass"
    pgpass.write_text(f"{host}:{port}:{db}:{name}:{SECRET}\n")
    pgpass.chmod(0o600)
    assert optuna_io.study_names(url) == ["s"]


def test_a_study_runs_on_postgresql_and_the_password_is_never_recorded(
        role: tuple[str, str], no_credentials: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tuner.cluster import build_cluster
    from tuner.experiment import parse_experiment
    from tuner.loop import StudyRunner

    _, url = role
    monkeypatch.setenv("PGPASSWORD", SECRET)
    text = tiny_yaml(tmp_path / "r", url)
    exp = parse_experiment(text, "tiny.yaml")
    for logger in ("sqlalchemy", "optuna", "ecntune", "psycopg", "tuner"):
        caplog.set_level(logging.DEBUG, logger=logger)
    with build_cluster(exp) as cluster:
        res = StudyRunner(exp, text, cluster, study_name="pg1").run()
    assert res.storage == url
    st = optuna_io.load_study("pg1", url)
    assert [t.state.name for t in st.trials] == ["COMPLETE"] * 3  # baseline + 2
    recorded = json.dumps(st.user_attrs) + json.dumps([t.user_attrs for t in st.trials])
    assert SECRET not in recorded and SECRET not in caplog.text
    files = [p for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert files and not [p for p in files if SECRET in p.read_text(errors="replace")]


def test_janitor_fails_a_dead_workers_trial_and_requeues_its_params(pg_url: str) -> None:
    """Trial 0's worker beats once and dies; trial 1's keeps beating. After the grace period
    (two beats) ``fail_dead`` fails 0 only, and the next ask gets 0's params back."""
    from optuna.distributions import FloatDistribution
    from optuna.samplers import RandomSampler

    st = optuna_io.create_study("j", pg_url, ["maximize"], RandomSampler(seed=1), heartbeat_s=1)
    dists = {"x": FloatDistribution(0, 1)}
    dead, live = optuna_io.ask(st, dists), optuna_io.ask(st, dists)
    optuna_io.record_heartbeat(st, dead.number)
    assert optuna_io.fail_dead(st) == []
    for _ in range(6):  # 3 s: past the 2 s grace for the dead one; the live one beats
        optuna_io.record_heartbeat(st, live.number)
        time.sleep(0.5)
    # The live worker goes on beating while the janitor runs, as a live worker does: the
    # checks below may take longer than the grace on a loaded machine.
    stop = threading.Event()

    def keep_beating() -> None:
        while not stop.wait(0.25):
            optuna_io.record_heartbeat(st, live.number)

    beat = threading.Thread(target=keep_beating)
    beat.start()
    try:
        other = optuna_io.load_study("j", pg_url, heartbeat_s=1)  # any worker may janitor
        assert optuna_io.fail_dead(other) == [dead.number]
        assert optuna_io.fail_dead(other) == []
    finally:
        stop.set()
        beat.join()
    states = {t.number: t.state.name for t in st.get_trials()}
    assert states[dead.number] == "FAIL" and states[live.number] == "RUNNING"
    assert other.trials[dead.number].user_attrs["verdict"] == "failed:worker_died"
    again = optuna_io.ask(other, dists)
    assert again.params == dead.params
    assert other.trials[again.number].system_attrs["failed_trial"] == dead.number
    assert "verdict" not in other.trials[again.number].user_attrs  # not the dead run's result
