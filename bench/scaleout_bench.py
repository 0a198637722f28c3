"""Scale-out benchmark (issue #13): 1, 2 and 4 simulated workers sharing one study.

``experiments/quick.yaml`` with ``canary.slices: 4`` (four identical simulated slices) runs
with N ``ecntune worker`` processes (slices sim0..simN-1) against one study on PostgreSQL
(``--storage URL``, or a private server started from Debian's binaries as the tests do), with
the same total trial budget. Reported per N:

* **canary time** to reach 98 % of the best score known (the best over every run here): a
  slice's clock is the simulated seconds measured on it (baseline and trial replicates, one
  after the other); slices run side by side, so the study's clock when a trial ends is its
  slice's clock. On a 2-core machine the processes share the CPU, so this, not wall time, is
  what N slices of a real fabric would take;
* the searched trials finished (study-wide) when that point was reached;
* wall time of the whole run (on 2 cores: what the machine, not the method, costs).

Writes its section of docs/benchmarks.md (between ``<!-- scaleout:start -->`` and
``<!-- scaleout:end -->``). Run::

    .venv/bin/python bench/scaleout_bench.py [--trials 24] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- scaleout:start -->", "<!-- scaleout:end -->"
QUICK = ROOT / "experiments" / "quick.yaml"
TARGET = 0.98


@dataclass
class Run:
    workers: int
    seed: int
    wall_s: float
    points: list[tuple[float, int, float]]  # (slice clock s when it ended, trial, score)
    searched: int
    end_s: float  # the study's canary clock at its end (the busiest slice's)


def experiment(folder: Path, storage: str, trials: int, seed: int) -> Path:
    import yaml

    doc = yaml.safe_load(QUICK.read_text(encoding="utf-8"))
    doc["canary"]["slices"] = 4
    doc["budget"]["trials"] = trials
    doc["budget"]["wall_time_s"] = 3600
    doc.setdefault("search", {})["warm_starts"] = False  # measure the search, not the seeds
    doc["storage"] = storage
    doc.setdefault("sampler", {})["seed"] = seed
    doc["results_dir"] = str(folder / "results")
    doc["tracking"] = {"enabled": False}
    f = folder / "quick-slices.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return f


def clocks(storage: str, study: str) -> tuple[list[tuple[float, int, float]], int, float]:
    """Per finished trial: (its slice's simulated clock at its end, number, score)."""
    from tuner import optuna_io

    st = optuna_io.load_study(study, storage)
    trials = sorted(st.get_trials(deepcopy=False),
                    key=lambda t: (t.datetime_complete or t.datetime_start or 0))
    clock: dict[str, float] = {}
    points = []
    searched = 0
    for t in trials:
        if t.state.name in ("RUNNING", "WAITING"):
            continue
        ua = t.user_attrs
        s = str(ua.get("slice", "?"))
        canary_s = float(ua.get("metrics", {}).get("duration_s", 0.0)) * int(
            ua.get("replicates", 0))
        clock[s] = clock.get(s, 0.0) + canary_s
        if ua.get("role") == "baseline":
            continue
        searched += 1
        if t.state.name == "COMPLETE" and ua.get("score") is not None and not any(
                v > 0 for v in optuna_io.constraints(t).values()):
            points.append((clock[s], searched, float(ua["score"])))
    return points, searched, max(clock.values(), default=0.0)


def run(n: int, seed: int, storage_for: Any, trials: int, tmp: Path) -> Run:
    folder = tmp / f"n{n}-s{seed}"
    folder.mkdir()
    storage = storage_for(f"n{n}")
    exp = experiment(folder, storage, trials, seed)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "tuner", "worker", str(exp), "--slice",
                               f"sim{i}", "--study", "bench", "--no-mlflow"], cwd=folder,
                              env=env, stdout=(folder / f"sim{i}.log").open("wb"),
                              stderr=subprocess.STDOUT) for i in range(n)]
    for i, p in enumerate(procs):
        if p.wait() != 0:
            raise SystemExit(f"worker sim{i} of N={n} failed:\n"
                             f"{(folder / f'sim{i}.log').read_text()[-2000:]}")
    wall = time.monotonic() - t0
    points, searched, end = clocks(storage, "bench")
    return Run(n, seed, wall, points, searched, end)


def reach(r: Run, best: float) -> tuple[float, int] | None:
    """(slice clock, searched trials) at the first trial scoring >= TARGET * best."""
    hits = [(c, k) for c, k, s in r.points if s >= TARGET * best]
    return min(hits) if hits else None


def table(runs: list[Run]) -> list[str]:
    import statistics as st

    best = max(s for r in runs for _, _, s in r.points)
    lines = ["| workers | runs reaching 98 % | canary time to 98 % (median) | trials to 98 % "
             "(median) | best score (median) | canary time of the whole study (median) | "
             "wall time (median) |", "|---|---|---|---|---|---|---|"]
    for n in sorted({r.workers for r in runs}):
        mine = [r for r in runs if r.workers == n]
        hits = [h for r in mine if (h := reach(r, best)) is not None]
        tops = [max((s for _, _, s in r.points), default=float("nan")) for r in mine]
        lines.append(
            f"| {n} | {len(hits)} of {len(mine)} | "
            + (f"{st.median(h[0] for h in hits) * 1e3:.0f} ms | "
               f"{st.median(h[1] for h in hits):.0f} |" if hits else "- | - |")
            + f" {st.median(tops):.3f} | {st.median(r.end_s for r in mine) * 1e3:.0f} ms | "
            f"{st.median(r.wall_s for r in mine):.0f} s |")
    return lines + ["", f"Best score known (over these {len(runs)} runs): {best:.3f}; target "
                    f"{TARGET:.0%} of it = {TARGET * best:.3f}. Per run (workers/seed: canary "
                    "time to target, trials): " + "; ".join(
                        f"{r.workers}/{r.seed}: " + (f"{h[0] * 1e3:.0f} ms, {h[1]}"
                                                     if (h := reach(r, best)) else "-")
                        for r in runs) + "."]


def write(section: str) -> None:
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Benchmarks\n"
    block = f"{START}\n{section.rstrip()}\n{END}"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24, help="study budget (all workers)")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--seeds", type=int, default=3, help="runs per worker count (sampler seed)")
    ap.add_argument("--storage", help="a PostgreSQL server URL (superuser, no password); a "
                                      "fresh database per run is created on it")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    load = os.getloadavg()[0]
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="scaleout-bench-") as td:
        from tests.scaleout.pg import PgServer, server

        if args.storage:
            pg: PgServer | str = PgServer(admin_url=args.storage, tcp_host="", tcp_port=0)
        else:
            pg = stack.enter_context(server())
        if isinstance(pg, str):
            raise SystemExit(pg)

        def storage_for(tag: str) -> str:
            return stack.enter_context(pg.database())

        runs = [run(n, seed, storage_for, args.trials, Path(td))
                for seed in range(args.seeds) for n in counts]
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = "\n".join([
        "## Scale-out: parallel simulated slices",
        "",
        f"Produced by `bench/scaleout_bench.py` on {stamp}: `experiments/quick.yaml` with "
        f"`canary.slices: 4`, {args.trials} searched trials per study (all workers together), "
        f"{args.seeds} runs (sampler seeds) per worker count, "
        "N `ecntune worker` processes on slices sim0..simN-1 sharing one study on PostgreSQL "
        "(TPE, constant liar; warm starts off, so the search itself is measured; MLflow off).",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average at start {load:.1f}.",
        "",
        *table(runs),
        "",
        "Canary time is simulated seconds on the slices (each trial's replicates; slices run "
        "side by side, so the study's clock is the clock of the slice that finished the trial); "
        "it is what N canary slices of a real fabric would take. Wall time is this 2-core "
        "machine running N simulators at once, so it does not shrink with N here.",
        "",
        "Each slice measures its own paired baseline (trial 0, `repeats: auto` replicates) "
        "before its first trial, and the twin screen rejects some proposals without canary "
        "time: with a few trials per slice, the baseline is a fixed cost per slice that bounds "
        "the speed-up of the busiest slice's clock.",
    ])
    print(section)
    if not args.no_write:
        write(section)


if __name__ == "__main__":
    main()
