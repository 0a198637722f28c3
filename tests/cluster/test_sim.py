"""Simulated backend specifics: the canary is a real subset; the rest keeps the baseline."""

from __future__ import annotations

import pytest

from rocesim import Fabric, Topology
from safety.limits import PfcThreshold
from tuner.cluster.sim import SimCluster
from tuner.errors import ConfigError
from tuner.experiment import FabricSpec, TopologySpec
from tuner.settings import Settings
from tuner.workload import CollectivePart, Workload

SPEC = FabricSpec(topology=TopologySpec(leaves=2, spines=1, hosts_per_leaf=3),
                  max_time_us=5_000, step_us=250)


def test_canary_is_leaf0_and_its_hosts() -> None:
    c = SimCluster(SPEC, ["leaf0"])
    d = c.describe()
    assert d.canary_switches == ["leaf0"]
    assert len(d.canary_nics) == 3 and len(d.other_nics) == 3
    assert "leaf1" in d.other_switches
    # the twin's own buffer model bounds Kmax: 32 MiB shared, alpha 1/8 (rocesim Topology
    # defaults), two equal-speed senders: 2 x B/8 / (1 + 2/8) = B/5
    pfc = PfcThreshold.from_facts(d.facts)
    assert pfc is not None and (pfc.pool_bytes, pfc.dynamic_th, pfc.fan_in) == (2**25, -3, 2)
    assert pfc.onset_bytes() == 2**25 // 5
    assert pfc.onset_bytes() <= Fabric(Topology(leaves=2, spines=1, hosts_per_leaf=3)
                                       ).pfc_onset_bytes("leaf0")  # reserve left out: safe side


def test_trials_never_touch_the_rest_of_the_fabric() -> None:
    c = SimCluster(SPEC, ["leaf0"], {"rpg_ai_rate": 7})
    before = c.read_all()
    d = c.describe()
    trial = Settings.uniform(d.canary_switches, d.canary_nics,
                             {"kmin_bytes": 10_000, "kmax_bytes": 90_000, "pmax_percent": 30,
                              "rpg_ai_rate": 100})
    c.apply(trial)
    after = c.read_all()
    for s in d.other_switches:
        assert after.switches[s] == before.switches[s]
    for n in d.other_nics:
        assert after.nics[n] == before.nics[n]
        assert after.nics[n].rpg_ai_rate == 7  # the experiment's `current:` baseline
    assert after.switches["leaf0"].kmin_bytes == 10_000
    assert after.switches["leaf0"].pmax_percent == 30  # 0.30 in rocesim, percent here


def test_unknown_canary_switch_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="canary.switches"):
        SimCluster(SPEC, ["leaf9"])


def test_a_rail_aligned_canary_is_one_rail_of_its_group() -> None:
    # fabric.topology.rails: leaf1 carries rail 1 (mlx5_1) of hosts 0-2; a trial changes those
    # three NIC ports and leaf1, and rail 0 of the same hosts keeps the baseline
    spec = FabricSpec(topology=TopologySpec(leaves=4, spines=1, hosts_per_leaf=3,
                                            nics_per_host=2, rails=True),
                      max_time_us=5_000, step_us=250)
    c = SimCluster(spec, ["leaf1"])
    d = c.describe()
    assert d.canary_nics == ["host0/mlx5_1", "host1/mlx5_1", "host2/mlx5_1"]
    assert "host0/mlx5_0" in d.other_nics and len(d.other_nics) == 9
    assert d.facts["rails"] == "true"
    c.apply(Settings.uniform(d.canary_switches, d.canary_nics, {"rpg_ai_rate": 100}))
    after = c.read_all()
    assert after.nics["host0/mlx5_1"].rpg_ai_rate == 100
    assert after.nics["host0/mlx5_0"].rpg_ai_rate != 100
    # rails 0 and 1 of the same hosts: their ring would cross the fabric where NCCL uses NVLink
    with pytest.raises(ConfigError, match="several rails of the same hosts"):
        SimCluster(spec, ["leaf0", "leaf1"])
    SimCluster(spec, ["leaf1", "leaf3"])  # rail 1 of both groups: distinct hosts


def test_a_three_tier_canary_pod_is_measured_and_described() -> None:
    # fabric.topology kind three_tier: the canary is leaf0 of pod 0; its collective crosses
    # the super-spines only to reach another pod's NICs, and the facts name the upper tier
    spec = FabricSpec(topology=TopologySpec(kind="three_tier", pods=2, leaves=2, spines=1,
                                            super_spines=2, hosts_per_leaf=2, core_gbps=50),
                      max_time_us=5_000, step_us=250)
    c = SimCluster(spec, ["leaf0"])
    d = c.describe()
    assert d.canary_nics == ["host0/mlx5_0", "host1/mlx5_0"] and len(d.other_nics) == 6
    assert {k: d.facts[k] for k in ("topology", "pods", "super_spines", "core_gbps")} == {
        "topology": "three_tier", "pods": "2", "super_spines": "2", "core_gbps": "50"}
    assert "super1" in d.other_switches
    m = c.measure(Workload(parts=[CollectivePart(op="alltoall", size_bytes=2**20,
                                                 iterations=1)]))
    assert m.collectives[0].busbw_gbytes_per_s > 0
