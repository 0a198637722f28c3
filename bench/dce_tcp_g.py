"""How much the twin's verdicts hang on its reading of ``dce_tcp_g`` (issue 22, item 8).

    .venv/bin/python bench/dce_tcp_g.py [--no-write]

NVIDIA's community page and the DCQCN paper read ``dce_tcp_g`` as the share of alpha kept
per ``dce_tcp_rtt`` (``kept``, the rocesim library's default); mstflint's own text reads it
as the gain (``vendor``: alpha = cnp*g + (1 - g)*alpha, g = G/1024; the tuner's twin's
default). Until hardware settles it, this bench
measures what the choice changes for the tuner: for each shipped simulated experiment, the same
settings (one knob at a time away from the baseline, the factory ``dce_tcp_g`` 1019 untouched
unless searched) are scored against that reading's own baseline, on the study's
paired placements, by the tuner's own score and guardrails. It reports the baseline under each
reading, the rank correlation of the scores (Spearman), agreement on feasibility (every
guardrail met), and how many of each reading's best 5 settings the other shares.
Writes the section between the markers in docs/fidelity.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "fidelity.md"
START, END = "<!-- dce-tcp-g:start -->", "<!-- dce-tcp-g:end -->"
EXPERIMENTS = ["experiments/quick.yaml", "experiments/moe-mix.yaml",
               "experiments/allreduce-400g.yaml"]
READINGS = ("kept", "vendor")
REPLICATES = 2


def settings_for(exp: Any) -> list[dict[str, int]]:
    """One knob at a time away from the baseline: each searched knob at 20, 50 and 80 % of
    its range (log ranges on a log scale), the others at the baseline; those the static
    limits refuse are left out. Random settings would mostly collapse the collectives, and a
    ranking among settings that all sit at the score's floor says nothing."""
    import math

    from safety.limits import PfcThreshold, check_proposal, kmax_ceiling
    from tuner.cluster.sim import SimCluster
    from tuner.space import build_space

    cluster = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current))
    desc, base = cluster.describe(), cluster.snapshot().flat()
    pfc = PfcThreshold.from_facts(desc.facts)
    space = build_space(exp).bounded(kmax_ceiling(pfc, exp.safety) if pfc else None)
    start = space.params_of(base)
    out: list[dict[str, int]] = []
    for d in space.dims:
        for u in (0.2, 0.5, 0.8):
            x = math.exp(math.log(d.low) + u * (math.log(d.high) - math.log(d.low))) \
                if d.log and d.low > 0 else d.low + u * (d.high - d.low)
            values = space.values({**start, d.name: x}, base)
            if values != base and values not in out and not check_proposal(
                    values, pfc=pfc, line_rate_mbps=int(desc.nic_gbps * 1000),
                    limits=exp.safety):
                out.append(values)
    return out


def scored(exp: Any, reading: str, settings: list[dict[str, int]]) -> dict[str, Any]:
    """The baseline and each setting, measured on the paired placements under ``reading``."""
    from objectives.score import ScoreConfig, score
    from tuner.cluster.sim import SimCluster
    from tuner.loop import score_config
    from tuner.settings import Settings

    fabric = exp.fabric.model_copy(update={"topology": exp.fabric.topology.model_copy(
        update={"dce_tcp_g_reading": reading})})
    cluster = SimCluster(fabric, list(exp.canary.switches), dict(exp.current))
    desc = cluster.describe()
    cfg: ScoreConfig = score_config(exp)
    base = [cluster.measure(exp.workload, replicate=r) for r in range(REPLICATES)]
    rows = []
    for values in settings:
        cluster.apply(Settings.uniform(desc.canary_switches, desc.canary_nics, values))
        ms = [cluster.measure(exp.workload, replicate=r) for r in range(REPLICATES)]
        sc = score(ms, base, cfg)
        rows.append({"score": sc.scalar, "feasible": sc.feasible})
    b = score(base, base, cfg)
    return {"rows": rows, "baseline": {k: b.metrics().get(k) for k in
                                       ("busbw_norm", "pause_us_per_s", "p99_us")}}


def compare(name: str, res: dict[str, dict[str, Any]]) -> dict[str, Any]:
    k, v = (np.array([r["score"] for r in res[x]["rows"]]) for x in READINGS)
    fk, fv = (np.array([r["feasible"] for r in res[x]["rows"]]) for x in READINGS)

    def best(scores: np.ndarray, feasible: np.ndarray) -> set[int]:
        """The 5 the tuner would rank first: feasible ones first, then by score."""
        return set(sorted(range(len(scores)),
                          key=lambda i: (-int(feasible[i]), -float(scores[i])))[:5])

    return {"experiment": name, "n": len(k), "rho": float(spearmanr(k, v).statistic),
            "feasible_agree": float(np.mean(fk == fv)),
            "feasible": (int(fk.sum()), int(fv.sum())),
            "best5_shared": len(best(k, fk) & best(v, fv)),
            "baseline": {x: res[x]["baseline"] for x in READINGS}}


def render(results: list[dict[str, Any]]) -> str:
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["## The twin's reading of `dce_tcp_g`", "",
             f"Produced by `bench/dce_tcp_g.py` on {when}. The same settings per experiment, "
             "one knob at a time away from the baseline (each searched knob at 20, 50 and 80 % "
             "of its range; those the static limits refuse left out), each scored against its "
             f"reading's own baseline on {REPLICATES} paired placements by the tuner's score "
             "and guardrails; `kept` is the rocesim library's default reading (share of alpha "
             "kept per `dce_tcp_rtt`), `vendor` is mstflint's text (the gain) and, since "
             "2026-12-06, the tuner's twin's default (`fabric.topology.dce_tcp_g_reading`).",
             "",
             "| experiment | settings | baseline busbw/line, kept → vendor | baseline PFC µs/s | "
             "baseline p99 µs | score rank ρ | feasibility agrees | feasible (kept, vendor) | "
             "best 5 shared (feasible first, then score) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        b = r["baseline"]
        lines.append(f"| {r['experiment']} | {r['n']} | {_pair(b, 'busbw_norm', '{:.3f}')} | "
                     f"{_pair(b, 'pause_us_per_s', '{:.0f}')} | {_pair(b, 'p99_us', '{:.1f}')} | "
                     f"{r['rho']:+.2f} | {r['feasible_agree']:.0%} | "
                     f"{r['feasible'][0]}, {r['feasible'][1]} | "
                     f"{r['best5_shared']} of 5 |")
    return "\n".join(lines)


def _pair(baseline: dict[str, dict[str, Any]], key: str, fmt: str) -> str:
    """``kept → vendor`` of one baseline metric."""
    a, b = (baseline[x].get(key) for x in READINGS)
    return f"{fmt.format(a) if a is not None else '-'} → {fmt.format(b) if b is not None else '-'}"


def main() -> None:
    from tuner.experiment import load_experiment

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    results = []
    for path in EXPERIMENTS:
        exp = load_experiment(ROOT / path)
        settings = settings_for(exp)
        res = {x: scored(exp, x, settings) for x in READINGS}
        results.append(compare(Path(path).stem, res))
        print(results[-1], flush=True)
    text = render(results)
    print(text)
    if not a.no_write:
        from doc_sections import write_section

        write_section(DOC, START, END, text)


if __name__ == "__main__":
    main()
