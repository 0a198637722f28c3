"""Tracking helpers that need no MLflow server: secret redaction and the metric names."""

from __future__ import annotations

from objectives.measurement import CollectiveResult, Counters, LatencyResult, Measurement
from tuner.tracking import redact, trial_metrics


def test_redact_blanks_secret_values_only() -> None:
    text = ("fabric:\n  inventory:\n    user: ops\n    password: hunter2\n"
            "    key_passphrase: 's3cret'\n    api_token: abc\n    kmin_bytes: 1000\n")
    out = redact(text)
    assert "hunter2" not in out and "s3cret" not in out and "abc" not in out
    assert "    password: <redacted>" in out
    assert "user: ops" in out and "kmin_bytes: 1000" in out


def test_trial_metrics_names_and_sums() -> None:
    before = Counters(ports={"host0/mlx5_0": {"rx_prio3_pause": 1, "np_cnp_sent": 0},
                             "leaf0/Ethernet0": {"queue3_ecn_marked_pkts": 5}})
    after = Counters(ports={"host0/mlx5_0": {"rx_prio3_pause": 11, "np_cnp_sent": 7},
                            "leaf0/Ethernet0": {"queue3_ecn_marked_pkts": 25}})
    m = Measurement(
        collectives=[CollectiveResult(name="alltoall", size_bytes=4096, ranks=4, time_us=1.0,
                                      algbw_gbytes_per_s=2.0, busbw_gbytes_per_s=1.5)],
        latency=LatencyResult(count=10, p50_us=1.0, p99_us=2.0, p999_us=3.0, max_us=4.0),
        counters_before=before, counters_after=after, duration_s=0.5)
    got = trial_metrics(m)
    assert got["busbw_gbytes_per_s.alltoall.4096"] == 1.5
    assert got["algbw_gbytes_per_s.alltoall.4096"] == 2.0
    assert (got["p50_us"], got["p99_us"], got["p999_us"]) == (1.0, 2.0, 3.0)
    assert got["pfc_pause_frames"] == 10
    assert got["cnp_sent"] == 7
    assert got["ecn_marked_pkts"] == 20
    assert got["lossless_drops"] == 0


# -- secrets: the parsed YAML is walked, URLs lose their passwords ----------------------------

HOSTILE_YAML = """\
name: s
description: "store at postgresql://ops:PW_DESC@db/x, fine"
storage: 'postgresql+psycopg2://ops:PW_STORAGE@db:5432/optuna?sslmode=require'
tracking: {uri: "https://ml:PW_TRACKING@mlflow.example/", experiment: e}
fabric:
  inventory:
    hosts:
      - {name: h0, "password": PW_FLOW}
      - name: h1
        'key_passphrase': PW_QUOTED
        private_key: |
          PW_BLOCK
    launcher: {nccl_env: {NCCL_IB_HCA: mlx5_0}}
    api_token:
      - PW_LIST
    url: http://127.0.0.1:5000/?token=PW_QUERY&x=1
"""


def test_redact_walks_the_parsed_yaml_and_urls() -> None:
    import yaml

    out = redact(HOSTILE_YAML)
    for n in ("DESC", "STORAGE", "TRACKING", "FLOW", "QUOTED", "BLOCK", "LIST", "QUERY"):
        assert f"PW_{n}" not in out, n
    data = yaml.safe_load(out)
    assert data["storage"] == ("postgresql+psycopg2://ops:<redacted>@db:5432/optuna"
                               "?sslmode=require")
    assert data["tracking"]["uri"] == "https://ml:<redacted>@mlflow.example/"
    assert data["fabric"]["inventory"]["hosts"][1]["private_key"] == "<redacted>"
    assert data["fabric"]["inventory"]["url"].endswith("?token=<redacted>&x=1")
    assert data["fabric"]["inventory"]["launcher"] == {"nccl_env": {"NCCL_IB_HCA": "mlx5_0"}}
    clean = "name: s  # a comment stays\nstorage: sqlite:///r/optuna.db\n"
    assert redact(clean) == clean  # nothing to blank: the text is kept as written
    assert "PW" not in redact("a: [unclosed\npassword: PW_BAD\n")  # unparsable: not passed on


def test_move_url_credentials_to_the_drivers_environment() -> None:
    import pytest

    from tuner.errors import ConfigError
    from tuner.tracking import move_url_credentials

    urls, env = move_url_credentials({
        "storage": "postgresql://ops:p%40ss@db:5432/optuna",
        "tracking.uri": "https://ml:PW2@mlflow.example:443/x"})
    assert urls == {"storage": "postgresql://ops@db:5432/optuna",
                    "tracking.uri": "https://mlflow.example:443/x"}
    assert env == {"PGPASSWORD": "p@ss", "MLFLOW_TRACKING_PASSWORD": "PW2",
                   "MLFLOW_TRACKING_USERNAME": "ml"}
    urls, env = move_url_credentials({"storage": "sqlite://u:PW@//tmp/o.db", "x": None})
    assert urls == {"storage": "sqlite:////tmp/o.db", "x": None} and env == {}
    with pytest.raises(ConfigError, match="storage: a password in a mysql URL"):
        move_url_credentials({"storage": "mysql://u:PW@db/o"})
    with pytest.raises(ConfigError, match="tracking.uri: a second, different password"):
        move_url_credentials({"storage": "postgresql://u:A@db/o",
                              "tracking.uri": "postgresql://u:B@db/m"})


# -- the circuit breaker: one failure, then silence until the back-fill probe -----------------

def test_breaker_stops_calling_a_dead_server_after_the_first_failure(monkeypatch) -> None:
    import socket
    import threading
    import time

    from tuner.tracking import Tracker, TrialRecord

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    hits: list[float] = []

    def accept() -> None:  # a "server" that hangs up on every request
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            hits.append(time.monotonic())
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        tr = Tracker(f"http://127.0.0.1:{srv.getsockname()[1]}", "e", "/tmp/unused")
        tr.parent_run_id = "abc"  # the parent run was created before the server died
        assert tr.log_trial(TrialRecord(number=1, state="COMPLETE", verdict="ok")) is None
        first = len(hits)
        assert first >= 1 and tr.broken and len(tr.failures) == 1
        t0 = time.monotonic()
        for n in range(2, 30):
            assert tr.log_trial(TrialRecord(number=n, state="COMPLETE", verdict="ok")) is None
        tr.log_dir("/tmp", "report")
        tr.end_study({"x": 1.0}, {})
        assert len(hits) == first  # not one more connection
        assert time.monotonic() - t0 < 0.1
        try:  # the back-fill probe is always tried
            tr.nested_runs()
        except Exception:  # noqa: BLE001 - still down
            pass
        assert len(hits) > first
    finally:
        srv.close()


def test_scrub_finds_the_urls_the_scheme_regex_finds_in_linear_time() -> None:
    """Red team M5: ``scheme://rest`` as a regex retried every start of a long run of letters
    (40 KB in 3.9 s, so a valid 50 MB experiment held the results lock for minutes)."""
    import random
    import re
    import time

    from tuner.tracking import redact_url, scrub

    ref = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
    rng = random.Random(7)
    pieces = ["a", "Z", "9", "+", ".", "-", ":", "/", "://", " ", "'", "\"", "<", "@",
              "https://u:pw@h/x", "postgresql://a:b@db/o?password=z", "x"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        assert scrub(text) == ref.sub(lambda m: redact_url(m.group(0)), text), text
    t0 = time.perf_counter()
    for text in ("a" * 1_000_000, "x1" * 500_000, "a://" * 250_000, "-a" * 500_000):
        scrub(text)
    assert time.perf_counter() - t0 < 5.0  # the regex: ~15 min for the first alone


def test_input_files_are_regular_and_bounded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Red team L3: a FIFO hung the read, /dev/zero was read without bound."""
    import os
    import time

    import pytest

    from tuner.errors import ConfigError
    from tuner.input_checks import MAX_FILE_BYTES, read_text_file

    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file"):
        read_text_file(fifo, "experiment file")
    assert time.monotonic() - t0 < 5
    with pytest.raises(ConfigError, match="/dev/zero: not a regular file"):
        read_text_file("/dev/zero", "experiment file")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 1 MB"):
        read_text_file(big, "experiment file")
    big.write_bytes(b"#" * MAX_FILE_BYTES)
    assert len(read_text_file(big, "experiment file")) == MAX_FILE_BYTES


def test_a_large_experiment_needs_large(tmp_path) -> None:
    """Red team M5: input sizes are bounded (1 MB) unless the operator says ``--large``, for
    that command only."""
    import pytest
    from click.testing import CliRunner

    from tuner.cli import main
    from tuner.errors import ConfigError
    from tuner.input_checks import MAX_FILE_BYTES, read_text_file

    exp = tmp_path / "big.yaml"
    exp.write_text("# " + "x" * (2 * MAX_FILE_BYTES) + "\nname: big\nresults_dir: "
                   f"{tmp_path / 'r'}\nworkload: {{parts: [{{kind: collective, op: all_reduce, "
                   "size_bytes: 1048576, iterations: 1}]}\ntracking: {enabled: false}\n")
    res = CliRunner().invoke(main, ["preflight", str(exp)])
    assert res.exit_code == 2 and "larger than 1 MB" in res.stderr and "--large" in res.stderr
    res = CliRunner().invoke(main, ["--large", "preflight", str(exp)])
    assert res.exit_code == 0, res.output
    with pytest.raises(ConfigError, match="larger than 1 MB"):  # the next command: 1 MB again
        read_text_file(exp, "experiment file")
