"""Tracking helpers that need no MLflow server: secret redaction and the metric names."""

from __future__ import annotations

from objectives.measurement import CollectiveResult, Counters, LatencyResult, Measurement
from tuner.tracking import redact, trial_metrics


def test_redact_blanks_secret_values_only() -> None:
    text = ("fabric:\n  inventory:\n    user: ops\n    password: hunter2\n"
            "    key_passphrase: 's3cret'\n    api_token: abc\n    kmin_bytes: 1000\n")
    out = redact(text)
    assert "hunter2" not in out and "s3cret" not in out and "abc" not in out
    assert "    password: '<redacted>'" in out
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
