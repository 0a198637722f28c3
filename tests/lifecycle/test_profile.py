"""The watch decision rule: calibrated false alarms, power, degenerate windows, the textfile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objectives.measurement import Counters
from tuner.errors import ConfigError
from tuner.lifecycle.profile import (
    TrafficProfile,
    compare,
    features,
    load_profile,
    prometheus_text,
    welch,
    write_textfile,
)


def _profile(samples: dict[str, list[float]], interval_s: float = 1.0) -> TrafficProfile:
    return TrafficProfile(study="s1", interval_s=interval_s, samples=samples)


def test_welch_matches_scipy() -> None:
    """Welch's t and p against scipy's own ``ttest_ind(equal_var=False)``."""
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(0)
    a, b = list(rng.normal(0, 1, 7)), list(rng.normal(0.8, 2, 5))
    t, _, p = welch(a, b)
    ref = ttest_ind(b, a, equal_var=False)
    assert t == pytest.approx(float(ref.statistic))
    assert p == pytest.approx(float(ref.pvalue))


def test_false_alarm_rate_is_at_most_alpha() -> None:
    """Unchanged mix: 4 counters, lognormal noise (sd 0.3 in log), 6 vs 6 intervals. Over 2000
    independent checks the rule must alarm in at most alpha = 1 % of them (Bonferroni keeps the
    family-wise rate below alpha; +3 binomial sigmas of slack for 2000 draws)."""
    rng = np.random.default_rng(1)
    alarms = 0
    checks = 2000
    for _ in range(checks):
        base = {f"c{i}": list(np.exp(rng.normal(10, 0.3, 6))) for i in range(4)}
        now = {f"c{i}": list(np.exp(rng.normal(10, 0.3, 6))) for i in range(4)}
        alarms += compare(_profile(base), now, 1.0, alpha=0.01, min_ratio=1.0).retune_advised
    bound = 0.01 + 3 * math.sqrt(0.01 * 0.99 / checks)
    assert alarms / checks <= bound, alarms


def test_power_against_a_doubling() -> None:
    """One counter doubles (log shift 0.69 = 2.3 noise sd). With 12 intervals per window the
    expected power is ~97 % (t ~ 0.69 / (0.3 * sqrt(2/12)) = 5.6 against a critical 3.4 at
    alpha/k = 0.0025, df ~ 22); with 6 it is only about half, which is why watch samples 12."""
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(300):
        base = {f"c{i}": list(np.exp(rng.normal(10, 0.3, 12))) for i in range(4)}
        now = {f"c{i}": list(np.exp(rng.normal(10, 0.3, 12))) for i in range(4)}
        now["c2"] = [2 * x for x in now["c2"]]
        v = compare(_profile(base), now, 1.0)
        hits += v.retune_advised and [f.feature for f in v.moved] == ["c2"]
    assert hits / 300 > 0.9


def test_significant_but_small_change_is_not_a_retune() -> None:
    """Many quiet intervals make a 10 % shift significant; below min_ratio it is not advised."""
    base = {"c": [100.0 + (i % 3) * 0.1 for i in range(30)]}
    now = {"c": [110.0 + (i % 3) * 0.1 for i in range(30)]}
    v = compare(_profile(base), now, 1.0, min_ratio=1.5)
    assert v.features[0].p_value < 1e-6
    assert not v.retune_advised
    assert compare(_profile(base), now, 1.0, min_ratio=1.05).retune_advised


def test_idle_counter_that_wakes_up_is_flagged() -> None:
    """ECN marks 0 in every tuned interval and thousands now: zero spread on one side is fine,
    the floor (one event per interval) keeps the log finite."""
    v = compare(_profile({"m": [0.0] * 4}), {"m": [3e6, 2e6, 2.5e6, 1.5e6]}, 0.01)
    assert v.retune_advised and v.features[0].ratio > 1e3
    quiet = compare(_profile({"m": [0.0] * 4}), {"m": [0.0] * 4}, 1.0)
    assert not quiet.retune_advised and quiet.features[0].p_value == 1.0


def test_too_few_intervals_is_bad_input() -> None:
    with pytest.raises(ConfigError, match="at least 3 intervals"):
        compare(_profile({"m": [1.0, 2.0]}), {"m": [1.0, 2.0, 3.0]}, 1.0)


def test_features_are_rates_of_named_counters() -> None:
    delta = Counters(ports={
        "host0/mlx5_0": {"np_cnp_sent": 50, "tx_prio3_bytes": 1000, "tx_prio0_bytes": 10},
        "leaf0/Ethernet0": {"queue3_ecn_marked_pkts": 40, "pfc3_rx_pause_us": 7}})
    f = features(delta, 0.5)
    assert f == {"np_cnp_sent": 100.0, "tx_prio3_bytes": 2000.0, "tx_other_prio_bytes": 20.0,
                 "queue3_ecn_marked_pkts": 80.0, "pfc3_rx_pause_us": 14.0}
    assert "rx_prio3_pause_duration" not in f  # absent is not zero


def test_each_port_is_divided_by_its_own_interval() -> None:
    """Targets read in parallel: leaf0 read late in one reading and early in the next saw
    400 frames/s over its own 0.25 s, not over the 0.5 s between the readings' ends."""
    before = Counters.gather([({"leaf0/Ethernet0": {"pfc3_rx_pkts": 0}}, 10.40),
                              ({"host0": {"np_cnp_sent": 0}}, 10.10)])
    after = Counters.gather([({"leaf0/Ethernet0": {"pfc3_rx_pkts": 100}}, 10.65),
                             ({"host0": {"np_cnp_sent": 60}}, 10.70)])
    delta = after.delta(before)
    assert delta.at("leaf0/Ethernet0") == pytest.approx(0.25)
    assert delta.at("host0") == pytest.approx(0.60)
    f = features(delta, 0.5)
    assert f["pfc3_rx_pkts"] == pytest.approx(400.0)
    assert f["np_cnp_sent"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="leaf0/Ethernet0"):
        features(before.delta(after), 0.5)  # read backwards in time


def test_prometheus_textfile_parses_with_the_reference_client(tmp_path) -> None:  # noqa: ANN001
    """The official Python client's parser reads every family and sample back."""
    from prometheus_client import parser
    prof = _profile({"np_cnp_sent": [1.0, 2.0, 1.5], 'we"ird\\name': [1.0, 1.0, 1.0]})
    v = compare(prof, {"np_cnp_sent": [900.0, 1000.0, 1100.0],
                       'we"ird\\name': [1.0, 1.0, 1.0]}, 1.0)
    path = write_textfile(tmp_path / "ecntune.prom", prometheus_text(v, prof, 1.7e9))
    fams = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    assert fams["ecntune_watch_retune_advised"].samples[0].value == 1.0
    assert fams["ecntune_watch_retune_advised"].type == "gauge"
    moved = {s.labels["feature"]: s.value for s in fams["ecntune_watch_moved"].samples}
    assert moved == {"np_cnp_sent": 1.0, 'we"ird\\name': 0.0}
    assert not list(tmp_path.glob(".*"))  # the temporary file was renamed away


def test_profile_roundtrip_and_bad_file(tmp_path) -> None:  # noqa: ANN001
    prof = _profile({"x": [1.0, 2.0, 3.0]})
    assert load_profile(prof.save(tmp_path / "p.json")) == prof
    (tmp_path / "bad.json").write_text('{"interval_s": -1}')
    with pytest.raises(ConfigError, match="bad.json: not a traffic profile: interval_s"):
        load_profile(tmp_path / "bad.json")
