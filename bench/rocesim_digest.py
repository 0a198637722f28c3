"""Digests of rocesim's outputs on 9 scenarios that between them reach every mechanism of the
kernel, to show that a speed change left the results bit for bit as they were. Run::

    .venv/bin/python bench/rocesim_digest.py save      # before the change -> results/digest.json
    .venv/bin/python bench/rocesim_digest.py compare   # after it: exit 1 on any difference

A digest covers every flow's state, every counter, the probe samples, every link's time series
and ``SimResult.to_dict()`` (wall time excluded). One state value is a don't-care and is
left out: the DCQCN byte counter of a flow with no rate limiter, which the limiter's
allocation restarts before anything reads it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import rocesim_bench  # noqa: E402

from rocesim import (  # noqa: E402
    Background,
    Collective,
    DcqcnConfig,
    EcnConfig,
    Fabric,
    Probes,
    Simulation,
    Topology,
    Workload,
)
from rocesim import _state as S  # noqa: E402

OUT = ROOT / "results" / "digest.json"


def digest(sim: Simulation) -> str:
    res = sim.result()
    h = hashlib.sha256()
    ff = sim.ff.copy()
    ff[sim.fi[:, S.ACTIVE] == 0, S.BYTECNT] = 0.0
    h.update(np.ascontiguousarray(ff).tobytes())
    for name in ("fi", "l_counters", "nic_ctr", "q", "ing", "lat", "back", "pacc", "ts_rate",
                 "ts_q", "ts_paused", "ts_t"):
        h.update(np.ascontiguousarray(getattr(sim, name)).tobytes())
    d = res.to_dict()
    d.pop("wall_s", None)
    h.update(json.dumps(d, sort_keys=True, default=str).encode())
    for _, v in sorted(res.timeseries.items()):
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()[:16]


def _incast() -> Simulation:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=9, nic_gbps=100))
    fab.set_ecn("sw0", EcnConfig(20_000, 200_000, 0.05))
    n = fab.nic_names
    return Simulation(fab, Workload(background=[Background("incast", 1.0, 8)],
                                    probes=Probes(pairs=2, interval_us=50, nics=[n[0], n[1]])),
                      max_time_us=3000)


def _quick() -> Simulation:
    fab = Fabric(Topology())
    for leaf in ("leaf0", "leaf1"):
        fab.set_ecn(leaf, EcnConfig(5_000, 50_000, 0.2))
    return Simulation(fab, Workload(
        collectives=[Collective("all_reduce", 8 * 2**20, fab.nic_names),
                     Collective("alltoall", 4 * 2**20, fab.nic_names)], probes=Probes()))


def _tree_acks() -> Simulation:
    fab = Fabric(Topology(leaves=2, hosts_per_leaf=4, ack_bytes=60))
    return Simulation(fab, Workload(collectives=[
        Collective("all_reduce", 4 * 2**20, fab.nic_names, algo="tree", iterations=2)],
        probes=Probes()))


def _all_marking_per_qp() -> Simulation:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=9, nic_gbps=100,
                          release_limiter=True))
    fab.set_ecn("sw0", EcnConfig(1000, 1001, 1.0))
    for nic in fab.nic_names:
        fab.set_dcqcn(nic, DcqcnConfig(min_time_between_cnps=4, cnp_moderation=2,
                                       rate_to_set_on_first_cnp=10000, clamp_tgt_rate=1))
    return Simulation(fab, Workload(background=[Background("incast", 0.6, 8)],
                                    probes=Probes(pairs=2, nics=fab.nic_names[:2])),
                      max_time_us=2000)


def _lossy_pfc() -> Simulation:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=9, nic_gbps=100,
                          buffer_bytes=1 << 20))
    n = fab.nic_names
    return Simulation(fab, Workload(background=[
        Background("incast", 1.0, 4, nics=n[:5]),
        Background("incast", 1.0, 4, nics=n[4:9], priority="other", lossless=False)]),
        max_time_us=2000)


def _a2a64() -> Simulation:
    fab = Fabric(Topology(leaves=4, spines=2, hosts_per_leaf=16, nic_gbps=200,
                          uplink_gbps=400))
    for leaf in ("leaf0", "leaf1", "leaf2", "leaf3"):
        fab.set_ecn(leaf, EcnConfig(10_000, 100_000, 0.1))
    return Simulation(fab, Workload(collectives=[
        Collective("alltoall", 8 * 2**20, fab.nic_names, iterations=2)], probes=Probes()))


def _s2_start() -> Simulation:
    fab = Fabric(Topology(leaves=8, spines=4, hosts_per_leaf=8, nic_gbps=200, uplink_gbps=400))
    return Simulation(fab, Workload(
        collectives=[Collective("all_reduce", 64 * 2**20, fab.nic_names),
                     Collective("alltoall", 16 * 2**20, fab.nic_names)], probes=Probes()),
        max_time_us=4000)


def _allgather_permutation() -> Simulation:
    fab = Fabric(Topology(leaves=2, hosts_per_leaf=4, spines=1))
    return Simulation(fab, Workload(
        collectives=[Collective("all_gather", 4 * 2**20, fab.nic_names, iterations=2)],
        background=[Background("permutation", 0.5)], probes=Probes()))


def _a2a128() -> Simulation:
    return Simulation(*rocesim_bench._a2a(128))  # the benchmark's scaling-curve scenario


SCENARIOS: dict[str, Callable[[], Simulation]] = {
    "incast": _incast, "quick": _quick, "tree_acks": _tree_acks,
    "all_marking_per_qp": _all_marking_per_qp, "lossy_pfc": _lossy_pfc, "a2a64": _a2a64,
    "s2_start": _s2_start, "allgather_permutation": _allgather_permutation,
    "a2a128": _a2a128}


def main(argv: list[str]) -> int:
    if argv[1:] not in (["save"], ["compare"]):
        print("usage: rocesim_digest.py save|compare", file=sys.stderr)
        return 2
    got = {}
    for name, build in SCENARIOS.items():
        sim = build()
        while not sim.done:
            sim.advance(250.0)  # chunked, as a tuner trial steps it
        got[name] = digest(sim)
        print(f"{name:22s} {got[name]}", flush=True)
    if argv[1] == "save":
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(got, indent=1) + "\n")
        print(f"saved {OUT}")
        return 0
    if not OUT.exists():
        print(f"no saved digests at {OUT}: run 'save' on the code before the change first",
              file=sys.stderr)
        return 2
    want = json.loads(OUT.read_text())
    differ = sorted(k for k in want if want[k] != got.get(k))
    print("identical" if not differ else f"DIFFERENT: {', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
