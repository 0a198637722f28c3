"""The kernel's first compile split over two processes (rocesim._compile, #24 item 4). Each run
below compiles the kernel from an empty numba cache in a fresh Python (~6-9 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocesim._compile import ELSEWHERE, HERE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # three cold compiles: ~70 s

# One small simulation in a fresh process; prints what the phases' dispatchers did.
CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
if sys.argv[1] == "dead-child":
    sys.executable = "/bin/false"  # the second process exits at once
from rocesim import Collective, Fabric, Probes, Simulation, Topology, Workload
from rocesim import _compile as C, _kernel as K
spawned = []
popen = C.subprocess.Popen
C.subprocess.Popen = lambda *a, **k: spawned.append(a) or popen(*a, **k)
fab = Fabric(Topology(kind="leaf_spine", leaves=2, spines=1, hosts_per_leaf=4), seed=3)
nics = fab.nic_names
wl = Workload(collectives=[Collective("all_reduce", 2**20, nics)],
              probes=Probes(pairs=2, interval_us=5.0))
sim = Simulation(fab, wl, seed=1)
again = Simulation(fab, wl, seed=2)  # built before anything runs: no second split
res = sim.run()
sigs = C.signatures(sim)
print(json.dumps({
    "cold_after": C.cold(sigs["run"]),
    "spawned": len(spawned),
    "busbw": res.collectives[0].busbw_gbytes_per_s,
    "lat": [float(x) for x in res.latency_us],
    "phases": {n: {"compiled": [str(s) for s in getattr(K, n).signatures],
                   "expected": str(sigs[n]),
                   "hits": sum(getattr(K, n)._cache_hits.values()),
                   "misses": sum(getattr(K, n)._cache_misses.values())}
               for n in sigs},
}))
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], str]]:
    """Per case, the child's report and its stderr: ``split`` (the default), ``one`` (compiled
    in one process) and ``dead-child`` (the second process fails)."""
    out = {}
    for case in ("split", "one", "dead-child"):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path_factory.mktemp(case)),
                   ROCESIM_SPLIT_COMPILE="0" if case == "one" else "1")
        run = subprocess.run([sys.executable, "-c", CHILD, case], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True, timeout=600)
        out[case] = (json.loads(run.stdout.strip().splitlines()[-1]), run.stderr)
    return out


def test_the_phase_signatures_are_the_ones_run_compiles(fresh: dict) -> None:
    """A phase precompiled with any other signature would be compiled again by ``run``."""
    one, _ = fresh["one"]
    for name, ph in one["phases"].items():
        assert ph["compiled"] == [ph["expected"]], name


def test_split_compile_gives_the_same_kernel(fresh: dict) -> None:
    """The second process's phases reach ``run`` through the cache (a hit, no compile here),
    and the simulation is bit-identical to the one compiled in one process."""
    (split, _), (one, _) = fresh["split"], fresh["one"]
    for name in ELSEWHERE:
        assert split["phases"][name]["hits"] == 1 and split["phases"][name]["misses"] == 0, name
    for name in (*HERE, "run"):
        assert split["phases"][name]["misses"] == 1, name
    assert len(one["lat"]) > 100 and split["lat"] == one["lat"]
    assert split["busbw"] == one["busbw"]
    assert not split["cold_after"] and not one["cold_after"]
    assert split["spawned"] == 1 and one["spawned"] == 0


def test_a_cold_compile_is_announced_once(fresh: dict) -> None:
    """Several seconds of silence on a first run get a line (the CLI shows it: tests/tuner)."""
    for case in ("split", "one"):
        err = fresh[case][1]
        assert err.count("compiling rocesim's kernel into numba's cache") == 1, (case, err)


def test_a_failed_second_process_costs_time_only(fresh: dict) -> None:
    """It is named in a warning, and this process compiles its phases: the same results."""
    (dead, err), (one, _) = fresh["dead-child"], fresh["one"]
    assert "second compile process failed (exit 1)" in err
    for name in ELSEWHERE:
        assert dead["phases"][name]["misses"] == 1, name
    assert dead["lat"] == one["lat"] and dead["busbw"] == one["busbw"]
