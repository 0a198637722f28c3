"""The ecmp-collision example, measured (#23): per paired replicate (same simulation seed, so
the same probe pairs and placements), the AlltoAll busbw and the uplink balance of
experiments/ecmp-collision.yaml (planted collision) and of the suggested fix
(experiments/ecmp-collision-fixed.yaml: a UDP source port per QP, 4 QPs per connection), plus
the fix's two halves alone. Prints the Markdown rows of docs/diagnose.md's fabric section.

    .venv/bin/python bench/ecmp_collision.py [REPLICATES]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from objectives.score import t_interval
from tuner.cluster.sim import SimCluster
from tuner.diagnose.fabric import _stress_workload, sim_findings
from tuner.experiment import parse_experiment

ROOT = Path(__file__).resolve().parents[1]


def _cluster(name: str, **change: Any) -> tuple[Any, SimCluster]:
    data = yaml.safe_load((ROOT / "experiments" / name).read_text())
    data["fabric"]["ecmp"].update(change.pop("ecmp", {}))
    for part in data["workload"]["parts"]:
        if part.get("op") == "alltoall":
            part.update(change)
    exp = parse_experiment(yaml.safe_dump(data), name)
    return exp, SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current),
                           name=exp.name)


def measure(name: str, n: int, **change: Any) -> tuple[list[float], int]:
    """AlltoAll busbw (GB/s) per replicate, and in how many replicates the fabric check
    found a hot uplink (the stress run with that replicate's seed)."""
    exp, sim = _cluster(name, **change)
    ports, nics = sim.flow_names()
    busbw, hot = [], 0
    for r in range(n):
        m = sim.measure(exp.workload, replicate=r)
        busbw.append(next(c.busbw_gbytes_per_s for c in m.collectives if c.name == "alltoall"))
        res = sim.stress(_stress_workload(exp), replicate=r)
        hot += any(f.check == "ecmp_balance" for f in sim_findings(res, ports, nics, ""))
    return busbw, hot


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    before, hot0 = measure("ecmp-collision.yaml", n)
    print(f"| planted collision (one source port, 1 QP) | {statistics.mean(before):.2f} | — "
          f"| {hot0}/{n} |")
    for label, name, change in (
            ("source port per QP, 1 QP", "ecmp-collision.yaml",
             {"ecmp": {"udp_sport": "per_qp"}}),
            ("one source port, 4 QPs", "ecmp-collision.yaml", {"qps_per_connection": 4}),
            ("fix: source port per QP, 4 QPs", "ecmp-collision-fixed.yaml", {})):
        after, hot = measure(name, n, **change)
        d = [a - b for a, b in zip(after, before, strict=True)]
        lo, hi = t_interval(d)
        rel = statistics.mean(d) / statistics.mean(before)
        print(f"| {label} | {statistics.mean(after):.2f} | {statistics.mean(d):+.2f} "
              f"[{lo:+.2f}, {hi:+.2f}] ({rel:+.0%}) | {hot}/{n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
