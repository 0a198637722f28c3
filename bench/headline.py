"""The README's headline, measured: ``ecntune run experiments/quick.yaml`` as shipped (twin
screen on, the default objective and guardrails) with sampler seeds 0..N-1, and the baseline
plus the warm starts alone (no sampler), each with its own confirmation.

The headline is the median over the sampler seeds of the winner's confirmed busbw change (0 for
a seed that confirmed nothing: the canary stays on the baseline), with the warm-starts-only
result beside it. Each study gets its own confirmation placements (drawn from its name), so the
numbers are not tuned to one set. Writes the ``headline`` section of docs/benchmarks.md
(between ``<!-- headline:start -->`` and ``<!-- headline:end -->``) and prints it::

    .venv/bin/python bench/headline.py [--seeds 5] [--procs 2]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

EXPERIMENT = ROOT / "experiments" / "quick.yaml"
START, END = "<!-- headline:start -->", "<!-- headline:end -->"


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One quick.yaml study (a worker process): its verdict lines and the winner's effects."""
    from search import warm_count

    from tuner.cluster.sim import SimCluster
    from tuner.experiment import load_experiment
    from tuner.loop import StudyRunner
    from tuner.study import verdict_lines

    exp = load_experiment(EXPERIMENT)
    upd: dict[str, Any] = {"results_dir": tempfile.mkdtemp(prefix="ecntune-headline-"),
                           "tracking": exp.tracking.model_copy(update={"enabled": False})}
    if job["seed"] is None:  # the baseline and the warm starts alone
        upd["budget"] = exp.budget.model_copy(update={"trials": warm_count(exp)})
        upd["sampler"] = exp.sampler.model_copy(update={"name": "random", "seed": 0})
    else:
        upd["sampler"] = exp.sampler.model_copy(update={"seed": job["seed"]})
    exp = exp.model_copy(update=upd)
    t0 = time.monotonic()
    cluster = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current), name=exp.name)
    name = f"headline-{'warm' if job['seed'] is None else job['seed']}"
    res = StudyRunner(exp, EXPERIMENT.read_text(), cluster, study_name=name).run()
    conf = res.confirmation
    best = conf.best if conf is not None else None
    counts: dict[str, int] = {}
    for t in res.trials:
        k = t.verdict.split(":")[0]
        counts[k] = counts.get(k, 0) + 1
    return {"seed": job["seed"], "winner": res.winner.number if res.winner else None,
            "busbw": best.effects.get("busbw", {}).get("change_percent")
            if best is not None and res.winner is not None else 0.0,
            "lines": verdict_lines(conf), "counts": counts, "wall_s": time.monotonic() - t0}


def render(runs: list[dict[str, Any]], wall_min: float) -> str:
    seeded = [r for r in runs if r["seed"] is not None]
    warm = next(r for r in runs if r["seed"] is None)
    med = statistics.median(r["busbw"] for r in seeded)
    lines = ["## Headline: quick.yaml as shipped", "",
             f"Produced by `bench/headline.py` on {_dt.date.today()} ({wall_min:.1f} min wall). "
             f"`ecntune run experiments/quick.yaml` with sampler seeds 0..{len(seeded) - 1}, "
             "and the baseline plus the warm starts alone; every study confirms on its own "
             "placements. The busbw change is the confirmed winner's (0 when nothing was "
             "confirmed).", "",
             f"**Median confirmed busbw change over {len(seeded)} sampler seeds: {med:+.1f} %** "
             f"(warm starts alone: {warm['busbw']:+.1f} %).", "",
             "| run | winner | confirmed busbw change | trials by verdict | wall s |",
             "|---|---|---|---|---|"]
    for r in runs:
        who = "warm starts alone" if r["seed"] is None else f"sampler seed {r['seed']}"
        counts = ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items()))
        lines.append(f"| {who} | {r['winner'] if r['winner'] is not None else 'none'} | "
                     f"{r['busbw']:+.1f} % | {counts} | {r['wall_s']:.0f} |")
    lines.append("")
    for r in runs:
        who = "warm starts alone" if r["seed"] is None else f"sampler seed {r['seed']}"
        lines += [f"{who}:", "", "```", *r["lines"], "```", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    jobs = [{"seed": s} for s in range(args.seeds)] + [{"seed": None}]
    t0 = time.monotonic()
    with get_context("spawn").Pool(args.procs) as pool:
        runs = pool.map(run_one, jobs)
    from search import write_doc

    text = render(runs, (time.monotonic() - t0) / 60)
    write_doc(text, START, END)
    print(text)


if __name__ == "__main__":
    main()
