"""First run against a warm run: `ecntune run experiments/quick.yaml` with an empty numba cache
(cold: the kernel is compiled) and with the cache it left (warm) (#24 item 4).

The machine is shared and noisy: each repeat runs a cold run, a cold run compiling in one
process (``ROCESIM_SPLIT_COMPILE=0``) and a warm run back to back, in rotating order, with
MLflow logging on (as the README runs it) and off; the table reports the median of the
per-repeat ratios, in wall time and in CPU time of the command and its children. Writes its
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocesim_bench import _machine  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- jit:start -->", "<!-- jit:end -->"
TARGET = 1.3


def one_run(cache: str, results: str, trials: int | None, mlflow: bool,
            split: bool = True) -> tuple[float, float]:
    """Wall and CPU seconds (the command and its children) of one `ecntune run
    experiments/quick.yaml` with the numba cache ``cache``."""
    cmd = [str(Path(sys.executable).parent / "ecntune"), "run", "experiments/quick.yaml",
           "--quiet", "--results", results] + ([] if mlflow else ["--no-mlflow"])
    if trials:
        cmd += ["--trials", str(trials)]
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, ROCESIM_SPLIT_COMPILE="1" if split else "0")
    c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    t1, c1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return t1 - t0, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)


Runs = tuple[tuple[float, float], tuple[float, float], tuple[float, float]]


def repeat(i: int, trials: int | None, mlflow: bool) -> Runs:
    """A cold run (the first compile split over two processes), a cold run compiling in one
    process, and a warm run, in an order that rotates with ``i``; each cold run gets a new
    cache."""
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        warm_cache = str(Path(tmp) / "warm")
        one_run(warm_cache, str(Path(tmp) / "prime"), trials, mlflow)  # fills it, not counted
        for k in ("cold", "one", "warm")[i % 3:] + ("cold", "one", "warm")[:i % 3]:
            cache = warm_cache if k == "warm" else str(Path(tmp) / f"empty-{k}")
            out[k] = one_run(cache, str(Path(tmp) / k), trials, mlflow, split=k != "one")
    return out["cold"], out["one"], out["warm"]


FIRST_SIM = """
import sys, time
t0 = time.perf_counter()
import rocesim.engine as E
init = E.Simulation.__init__
def first(self, *a, **k):
    if not getattr(E, "_seen", False):
        E._seen = True
        print(f"{time.perf_counter() - t0:.3f}", file=sys.stderr, flush=True)
    init(self, *a, **k)
E.Simulation.__init__ = first
from tuner.cli import main
main(sys.argv[1:])
"""


def first_simulation_s(results: str) -> float:
    """Seconds from process start to the first simulation of a warm quick.yaml run: the time a
    compile in a second process could hide behind the run's own set-up."""
    res = subprocess.run([sys.executable, "-c", FIRST_SIM, "run", "experiments/quick.yaml",
                          "--quiet", "--results", results, "--trials", "1"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return float(res.stderr.strip().splitlines()[0])


def _ratios(rows: list[Runs], col: int, field: int) -> float:
    return statistics.median(r[col][field] / r[2][field] for r in rows)


def render(table: dict[bool, list[Runs]], trials: int | None, first_sim: float) -> str:
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    what = f"--trials {trials}" if trials else "as shipped"
    n = len(next(iter(table.values())))
    lines = [START, "## First run (cold numba cache) against a warm run", "",
             f"Produced by `bench/jit_bench.py` on {now} on {_machine().split(';')[0]} "
             f"(load average at end {load:.1f}): "
             f"`ecntune run experiments/quick.yaml` ({what}; with MLflow logging, as the README "
             f"runs it, and with `--no-mlflow`), {n} repeats of three runs in rotating order: "
             "*cold* (empty numba cache; the first compile split over two processes, "
             "`rocesim/_compile.py`), *one process* (empty cache, `ROCESIM_SPLIT_COMPILE=0`: "
             "the compile as before), *warm* (the cache a run left). Ratios are per repeat, "
             f"then the median; CPU is the command's and its children's. Target cold/warm <= "
             f"{TARGET}.", "",
             "| MLflow | repeat | cold wall s | one process wall s | warm wall s | "
             "cold/warm wall | one process/warm wall | cold/warm CPU |",
             "|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for mlflow, rows in table.items():
        for i, (c, o, w) in enumerate(rows):
            lines.append(f"| {'on' if mlflow else 'off'} | {i} | {c[0]:.1f} | {o[0]:.1f} | "
                         f"{w[0]:.1f} | {c[0] / w[0]:.2f} | {o[0] / w[0]:.2f} | "
                         f"{c[1] / w[1]:.2f} |")
        wall, one, cpu = _ratios(rows, 0, 0), _ratios(rows, 1, 0), _ratios(rows, 0, 1)
        verdicts.append(f"MLflow {'on' if mlflow else 'off'}: cold/warm wall {wall:.2f} "
                        f"({'within' if wall <= TARGET else 'over'} the {TARGET} target; "
                        f"{one:.2f} compiling in one process), CPU {cpu:.2f}")
    lines += ["", "Median " + "; ".join(verdicts) + ".", "",
              "Where the cold run's extra time goes (the seconds in this paragraph up to "
              "'measured on 2026-12-07' were measured up to 2026-12-06 on an earlier 2-core "
              "host, which ran S2 in 0.64 s: compare the rocesim section). Before #24 item 4 "
              "(cProfile): numba IR "
              "inlining (`inline=\"always\"` copies and re-types each helper at every call "
              "site) ~30 %, type inference and SSA ~30 %, lowering and LLVM ~40 %. The helpers "
              "became separate compiled functions (results bit-identical; marked "
              "`alwaysinline` for LLVM since a small step, left to LLVM's cost model, was "
              "2.8x slower: S1 17 -> 6 ms at no compile cost), and then lost their Python "
              "entry points, which only the four functions the engine calls from Python need: "
              "the first compile of the kernel (one all-reduce on the default fabric, empty "
              "cache) went from 17.5 to 9.6 s, measured side by side; and one signature per "
              "helper took it from 9.0-9.3 to 8.2-8.8 s. Tried without gain: LLVM at -O1/-O2, "
              "IR-inlining the 20 helpers with one call site. What remains, on one simulation "
              "of quick_leaf_spine.yaml from an empty cache (8.4-8.8 s in one process, each "
              "function's compile timed): `burst_table` 0.8 s (its tables fill the "
              "structures), the two functions that set the structures up 0.3 s, the per-flow "
              "phases and the rest of the step ~2.6 s (`arrive` 0.3, `notify` 0.2, `react` "
              "0.7, `record` 0.4, `pfc` 0.3, `probes` 0.4), the later phases ~3.1 s "
              "(`service` 0.8, `marking` 0.6, `injection` 1.1, `collectives` 0.6), and `run` "
              "itself ~2.5 s (its typing and lowering, then LLVM on the linked module with "
              "every phase inlined: 1.7 s under numba's `numba:llvm_lock`). The split starts "
              "from the structures' types, before the tables exist: a second process compiles "
              "`burst_table`, then `service`, `marking` and `injection`, while this one compiles "
              "the other eight phases, then fills the tables and sets the structures up with "
              "what the second process left in the cache; `run` finds the rest there. That "
              "simulation, in two series of 3 runs, each alternating with another version: "
              "6.2-6.5 s against 7.0-7.5 s when this process compiled `burst_table` before "
              "starting the split (the first version), and 6.4-6.9 s against 9.6-9.9 s in one "
              "process; bit-identical (`tests/rocesim/test_compile.py`, "
              "`bench/rocesim_digest.py`). The second process exits without the interpreter's "
              "teardown once its last function is cached and named, which this process had "
              "waited for: ~0.5 s (that simulation, 4 pairs alternating with the version that "
              "waited: 5.5-6.5 s against 6.0-7.3 s). `run`'s own compile stays serial: ~2.5 s "
              "that two cores cannot share. Compiling in the background while the run sets up "
              f"would hide little: a warm run's first simulation starts {first_sim:.1f} s into "
              "the command (measured here, with MLflow). Measured on 2026-12-07 on an earlier "
              "host (family 25 model 17, S2 0.89 s; one simulation of the bench's single-switch "
              "fabric from an empty "
              "cache, split: 6.3-6.5 s, LLVM 3.2-3.5 s of it under `numba:llvm_lock`): "
              "`run`'s compile is 2.4-2.5 s, 2.0 s of it LLVM on its linked module (function "
              "passes on its own IR 0.4 s, the two module-level O3 rounds numba runs after "
              "linking 0.8 s, machine code 0.8 s). Tried and not kept: leaving the seven "
              "once-per-step phases out of line (`forceinline=False`) did not shorten it "
              "(7.2 s against 6.8-7.2 s: numba links and re-optimises the callees' code "
              "either way); running only numba's first O3 round on `run`'s module saved 0.9 "
              "s (5.6 s) but made the kernel 5-7 % slower (S2 0.94 s against 0.89 s, S3 2.14 "
              "against 1.99). Measured on the host of the table: `run`'s Python entry point "
              "unboxed the 107 arrays of the eight structures, and compiling it was 1.1-1.8 s "
              "of `run`'s 3.3-4.1 s compile (`run` compiled with and without it, 3 pairs); "
              "`run` now takes one table of the arrays' addresses and the structures' numba "
              "type (`state_table` and `unpack` in `rocesim/_kernel.py`; bit-identical). One "
              "simulation of quick_leaf_spine.yaml from an empty cache, 5 pairs alternating "
              "with the version before: `run`'s compile median 3.86 -> 3.59 s (paired "
              "differences +0.06 to -1.51 s, median -0.50 s).",
              END]
    return "\n".join(lines) + "\n"


def write_section(text: str) -> None:
    old = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in old and END in old:
        head, rest = old.split(START, 1)
        new = head + text.rstrip("\n") + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    DOC.write_text(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="repeats per MLflow setting")
    ap.add_argument("--trials", type=int, default=None, help="override budget.trials")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch the docs")
    args = ap.parse_args()
    table = {mlflow: [repeat(i, args.trials, mlflow) for i in range(max(1, args.repeats))]
             for mlflow in (True, False)}
    with tempfile.TemporaryDirectory() as tmp:  # the cache is warm after the runs
        first_sim = first_simulation_s(str(Path(tmp) / "first"))
    text = render(table, args.trials, first_sim)
    print(text)
    if not args.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
