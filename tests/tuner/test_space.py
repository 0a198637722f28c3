"""Search space: Kmax from a ratio keeps Kmin < Kmax; fixed knobs; Optuna distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner import optuna_io
from tuner.experiment import parse_experiment
from tuner.settings import KNOBS
from tuner.space import DEFAULT_SPACE, SearchSpace, build_space

ROOT = Path(__file__).resolve().parents[2]
BASE = {k: v.default for k, v in KNOBS.items()}
EXP = """
name: t
workload: {parts: [{kind: collective, op: alltoall, size_bytes: 65536}]}
search:
  knobs:
    kmin_bytes: {low: 1000, high: 100000, log: true}
    kmax_ratio: {low: 1.1, high: 4}
    rpg_ai_rate: {}
  fixed: {rpg_threshold: 7}
"""


def test_dims_and_fixed() -> None:
    space = build_space(parse_experiment(EXP))
    assert space.names == ["kmin_bytes", "kmax_ratio", "rpg_ai_rate"]
    ai = space.dims[2]
    assert (ai.low, ai.high, ai.integer) == (1, 131_071, True)  # hardware range by default
    vals = space.values({"kmin_bytes": 50_000, "kmax_ratio": 1.5, "rpg_ai_rate": 40}, BASE)
    assert vals["kmax_bytes"] == 75_000
    assert vals["rpg_threshold"] == 7
    assert vals["rpg_ai_rate"] == 40
    assert vals["rpg_hai_rate"] == 50  # untouched: baseline


def test_every_sampled_proposal_has_kmin_below_kmax() -> None:
    space = build_space(parse_experiment(EXP))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    dists = optuna_io.distributions(space)
    for _ in range(200):
        t = study.ask(dists)
        v = space.values(t.params, BASE)
        assert v["kmin_bytes"] < v["kmax_bytes"]
        study.tell(t, 0.0)


def test_params_of_round_trips_the_baseline() -> None:
    space = build_space(parse_experiment(EXP))
    p = space.params_of(BASE)
    assert p["kmax_ratio"] == 2.0  # vendor default 2 MiB / 1 MiB
    assert space.values(p, BASE)["kmax_bytes"] == BASE["kmax_bytes"]


def test_default_space_covers_issue_knobs_and_holds_factory_defaults() -> None:
    exp = parse_experiment("name: t\nworkload: {parts: [{kind: probe}]}\n"
                           "objective: {primary: p99_us}\n")
    space = build_space(exp)
    for knob in ("kmin_bytes", "kmax_ratio", "pmax_percent", "rpg_time_reset", "rpg_ai_rate",
                 "rpg_hai_rate", "rpg_min_dec_fac", "rate_reduce_monitor_period",
                 "min_time_between_cnps", "dce_tcp_g", "rpg_byte_reset", "rpg_threshold"):
        assert knob in space.names
    for d in space.dims:
        if d.name in KNOBS:
            assert d.low <= KNOBS[d.name].default <= d.high, d.name
    assert set(DEFAULT_SPACE) == set(space.names)


@pytest.mark.parametrize("name", ["quick", "new-cluster", "moe-mix", "allreduce-400g"])
def test_the_static_limits_are_built_into_the_space(name: str) -> None:
    """Issue #20/#21: a proposal the static limits refuse is a sampler bug, not a trial. Over
    2000 uniform draws from each shipped experiment's box, with the Kmax ceiling read from its
    simulated switch, none is refused; without the ceiling's map many are."""
    from safety.limits import PfcThreshold, check_proposal, kmax_ceiling
    from tuner.cluster.sim import SimCluster
    from tuner.experiment import load_experiment

    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    cluster = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current))
    desc, base = cluster.describe(), cluster.snapshot().flat()
    pfc = PfcThreshold.from_facts(desc.facts)
    assert pfc is not None
    free = build_space(exp)
    space = free.bounded(kmax_ceiling(pfc, exp.safety))
    rng = np.random.default_rng(0)

    def draw() -> dict[str, float]:
        out = {}
        for d in space.dims:
            u = rng.uniform()
            out[d.name] = (d.low * (d.high / d.low) ** u if d.log and d.low > 0
                           else d.low + u * (d.high - d.low))
        return out

    def refused(s: SearchSpace, params: dict[str, float]) -> bool:
        return bool(check_proposal(s.values(params, base), pfc=pfc,
                                   line_rate_mbps=int(desc.nic_gbps * 1000),
                                   limits=exp.safety))

    draws = [draw() for _ in range(2000)]
    assert sum(refused(space, p) for p in draws) == 0
    assert sum(refused(free, p) for p in draws) > 100  # the map is what keeps them in
    # A point inside the ceiling survives the round trip (warm starts are enqueued this way).
    inside = dict(base, kmin_bytes=64_000, kmax_bytes=256_000)
    back = space.values(space.params_of(inside), base)
    assert abs(back["kmin_bytes"] - 64_000) <= 1 and abs(back["kmax_bytes"] - 256_000) <= 2


@pytest.mark.parametrize("fabric, low_high", [
    ("", (1, 1_023)),  # the twin's default reading, mstflint's: the whole range
    ("fabric: {topology: {dce_tcp_g_reading: kept}}\n", (768, 1_023)),  # same gains, as 1 - g
    ("fabric: {backend: ssh, inventory_file: inv.yaml}\n", (1, 1_023)),  # the vendor range
])
def test_dce_tcp_g_default_range_follows_the_reading(fabric: str,
                                                     low_high: tuple[int, int]) -> None:
    exp = parse_experiment("name: t\nworkload: {parts: [{kind: collective, op: alltoall, "
                           "size_bytes: 65536}]}\n" + fabric)
    dim = next(d for d in build_space(exp).dims if d.name == "dce_tcp_g")
    assert (dim.low, dim.high) == low_high


def test_a_slice_baseline_under_the_kmax_ceiling_is_a_valid_trial(tmp_path: Path) -> None:
    """bench/scaleout_bench.py (quick.yaml, 4 slices) crashed every worker at its trial 0:
    under quick.yaml's Kmax ceiling the baseline's kmin param comes back fractional
    (1535232.74), which ``study.ask`` takes from the queue but ``create_trial``, the slice
    baseline's path (``optuna_io.ask_fixed``), refuses for an integer knob."""
    from safety.limits import PfcThreshold, kmax_ceiling
    from tuner import optuna_io
    from tuner.cluster.sim import SimCluster
    from tuner.experiment import load_experiment

    exp = load_experiment(ROOT / "experiments" / "quick.yaml")
    cluster = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current))
    pfc = PfcThreshold.from_facts(cluster.describe().facts)
    assert pfc is not None
    space = build_space(exp).bounded(kmax_ceiling(pfc, exp.safety))
    base = cluster.snapshot().flat()
    params = space.params_of(base)
    assert params["kmin_bytes"] != int(params["kmin_bytes"])  # the case that crashed
    study = optuna_io.create_study("s", f"sqlite:///{tmp_path / 'o.db'}", ["maximize"],
                                   optuna.samplers.RandomSampler())
    asked = optuna_io.ask_fixed(study, params, optuna_io.distributions(space),
                                {"role": "baseline", "slice": "sim0"})
    assert space.values(asked.params, base) == space.values(params, base)  # the same point
