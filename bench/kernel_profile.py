"""Where rocesim's kernel spends its time, by function and by source line (#24).

perf samples bench scenarios (bench/rocesim_bench.py's ``s1``, ``quick``, ``s2``, ``s4``,
``s3``) while they run a build of the kernel with line numbers, and each sample inside ``run``
is mapped to a line of rocesim/_kernel.py through the DWARF line table of that build's object
code, and so to the function the line is in (the helpers are inlined into ``run``). The build
is of a copy of rocesim in a temporary folder, with ``debug=True, boundscheck=False`` added to
its numba decorators and a numba cache of its own: the same code, compiled with line numbers,
and nothing of it reaches the project's cache. Needs Linux ``perf`` (``perf_event_paranoid``
<= 2 or root) and binutils ``objdump``.

What perf cannot count on a virtual machine without hardware counters, valgrind's cachegrind
counts by simulation: instructions, branches and their mispredictions, and data cache misses,
in the compiled code, per live flow-step of the scaling curve's all-to-all (the build the
project runs on this host, compiled natively into a numba cache of its own): a run to the end
less a run of one step. Needs ``valgrind``. Run::

    .venv/bin/python bench/kernel_profile.py [s2 s3 ...] [--runs N] [--no-write]

Writes its section of docs/benchmarks.md (between ``<!-- kernel-profile:start -->`` and
``<!-- kernel-profile:end -->``; other sections are kept).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import datetime as _dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from doc_sections import write_section  # noqa: E402
from rocesim_bench import _machine  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- kernel-profile:start -->", "<!-- kernel-profile:end -->"
DECORATOR = 'njit(cache=True, error_model="numpy",'
NAMES = {"s1": "S1", "quick": "tuner quick trial", "s2": "S2", "s4": "S4", "s3": "S3"}
TOP_LINES = 12
# What was tried against this profile (prose of the section: measured by hand, dated).
TRIED = (
    "Tried against this profile on 2026-12-07 on the host above, in alternating pairs with "
    "the kernel of the time (S2 best of 3, S3 one run per pair): the flows' float and int "
    "state in C order instead of Fortran order: S2 no different, S3 slower "
    "(3.8-4.6 s against 3.2-3.8 s); the transit ring as [flow, slot, hop], so that a flow's "
    "arrivals and its next sends share a cache line (bit-identical): best of 4 S2 1.30 against "
    "1.33 s, S3 3.15 against 3.29 s, inside this host's spread; `marking` fused into "
    "`injection`'s pass over each port's QPs (not bit-identical: the marking draws and the "
    "ingress sums in another order): slower, S2 1.53-1.90 against 1.32-1.66 s, S3 3.54-3.99 "
    "against 3.11-3.64 s. None was kept. The cost per live flow-step is flat from 4,032 to "
    "261,632 flows (the rocesim section's scaling curve) while the state grows from 15 to "
    "153 MB, from within this host's 32 MB L3 to far past it: the step is not bound by "
    "memory. What bounds it is the number of instructions it executes (the counts above: "
    "at 60-70 ns per live flow-step, over 3 instructions per cycle at this host's nominal "
    "2.45 GHz, with under 2 mispredicted branches and almost no misses past L1). Where they "
    "went before the change below (callgrind with the line-numbered build, on 2026-12-07, "
    "the 64-NIC all-to-all, per live flow-step, 572 in `run`): `mark` 197, `arrive` 139, "
    "`injection` 78, `_waterfill` 42, `offer` 36, `send` 31, `run` 19, `sending_rate` 10. "
    "About 90 of `mark`'s and 44 of `arrive`'s are their per-flow preambles (lines 837-839 "
    "and 536): the address of the flow's row in each per-flow array the phase reads and of "
    "its class's column in each per-link array, from bases and widths reloaded from the "
    "stack, since `run` holds more arrays than there are registers. Kept: the class axis "
    "(always 2 wide) of the six [link, class] arrays `arrive` and `mark` read at every hop, "
    "compiled as a constant (`CONST_DIMS` in rocesim/_kernel.py, checked by `state_table`; "
    "bit-identical): counted as in the table, 567 -> 539 instructions per live flow-step "
    "on the 64-NIC all-to-all and 571 -> 548 on S2; callgrind, 544 in `run`: `mark` 184, "
    "`arrive` 133, `injection` 77, `_waterfill` 41, `offer` 32, `send` 29, `run` 15, "
    "`sending_rate` 10; in alternating pairs on this host, S2 (best of 3, 8 pairs) 1.17-1.45 "
    "s, median 1.24, against 1.32-1.68 s, median 1.46, and S3 (5 pairs) 2.88-4.07 s, median "
    "3.27, against 3.35-4.21 s, median 3.64. Tried with it, counted the same way on the "
    "64-NIC all-to-all, and not kept: `lrate`'s axis too, 605 against 539; the flows' float "
    "and int state in C order with constant widths, 551; and, counted with the all-to-all "
    "stepped 50 µs at a time by hand (693,504 live flow-steps, where the bench's loop counts "
    "697,536; 542 with the six): every class axis constant (17 arrays), 554; the per-flow "
    "arrays' hop axis too (this fabric's 4), 547; `mark` skipping its loop's set-up for a "
    "flow with nothing queued at any hop, 580 against 570 before the change. LLVM's "
    "register allocation decides what a constant saves, and the "
    "savings do not add up: a constant for every fixed axis is not the refactor that cuts "
    "the preambles, fewer per-flow arrays might be. Earlier attempts, counted over the whole "
    "process (which moves by up to ~25 % between identical runs, now that the counts are "
    "repeated; the table counts the compiled code alone): moving `mark`'s rarely taken "
    "CE-mark path out of line, 576 against 572, no measured difference. Also not kept: "
    "telling LLVM that no two state arrays overlap (each array's address returned by a "
    "`noalias` function in `unpack`, bit-identical once the addresses escape; before that "
    "LLVM took the arrays for memory local to `run` and dropped stores made at its end, "
    "which moved the time series by a point): 3 alternating pairs, S2 1.33-1.58 against "
    "1.27-1.50 s, S3 3.09-3.35 against 2.88-3.37 s; possible aliasing is not what holds the "
    "step back."
    ' Counted in the compiled code on the 64-NIC all-to-all against 539, on 2026-12-07, '
    "and not kept: numba's fix-up of negative indices left out of the kernel (every index"
    " taken as non-negative, which the kernel's are), 596; `back` and `pacc` in one "
    "[flow, hop, 2] array, so that `mark` finds both from one row, 554; LLVM's loop "
    'vectoriser off, 543 (numba already leaves the SLP vectoriser off). '
    'Nor is the time elsewhere: on S2 `run` is 98 % of the scenario (cProfile: 1.70 of '
    '1.73 s; building the simulation 16 ms), and 0.4 % of its live flow-steps have '
    'nothing in flight (85,504 of 22,880,000, stepped one step at a time), so skipping '
    'idle flows would save nothing.'
    " Where S2's time goes by phase of the scenario (3 runs on this host, timed in chunks"
    ' of 100 µs): the all-to-all, 3.8 ms of simulated time with 4,288 live flows, '
    "0.87-1.05 s (53-64 ns per live flow-step); the ring all-reduce's remaining 26.5 ms "
    'with 256 flows, 0.49-0.60 s (72-88 ns per live flow-step), 34-38 % of the run. In '
    "that phase the passes over the 192 links take a third of the time (perf, S2's all-"
    'reduce alone, 3 runs: `service` 15.8 %, `pfc` 8.9 %, `arrival_limits` 3.2 %, `_wrr` '
    '2.4 %, `record` 1.3 %, `probes` 1.2 %). Counted in the compiled code on S2 against '
    '547.5 instructions per live flow-step, and not kept: `arrival_limits` fused into '
    "`pfc`'s pass over the links (one pass fewer), 555.8; `pfc` compiled on its own, "
    '557.1; `pfc` and `service`, 558.2. Every change to `run` moves the register '
    'allocation of its per-flow loops, and the kernel as it stands is the best of many '
    'such variants: a new one should be expected to count more by chance, and a gain has '
    'to beat that spread (about 10 instructions per live flow-step here).')

# The scenario's process: compiles the line-numbered kernel into its own cache, hands over the
# object code and where ``run`` was loaded, then runs the scenario once the parent says "go"
# (perf attached by then).
_CHILD = """
import sys
import rocesim_bench as B
from rocesim import _kernel as K
name, runs, obj = sys.argv[1], int(sys.argv[2]), sys.argv[3]
scenario = getattr(B, name)
scenario()
(ov,) = K.run.overloads.values()
with open(obj, "wb") as f:
    f.write(ov.library._get_compiled_object())  # numba's: the object code it compiled here
print("ready", ov.library.get_pointer_to_function(ov.fndesc.llvm_func_name), flush=True)
sys.stdin.readline()
for _ in range(runs):
    print("wall", scenario().wall_s, flush=True)
"""


# The scaling curve's all-to-all of N NICs: one step ("one"), to the end ("full"), or its live
# flow-steps counted (outside valgrind: counting is a run of its own).
_COUNT_CHILD = """
import sys
import rocesim_bench as B
from rocesim import Simulation
fab, wl = B._a2a(int(sys.argv[1]))
if sys.argv[2] == "count":
    print("flow_steps", B.live_flow_steps(fab, wl))
else:
    sim = Simulation(fab, wl)
    sim.advance(sim.dt)  # loads the kernel and runs one step
    while sys.argv[2] == "full" and not sim.done:
        sim.advance(50.0)
"""
# What the table reports, as sums of cachegrind's events.
COUNTS = {"instructions": ("Ir",), "branches": ("Bc", "Bi"),
          "mispredicted": ("Bcm", "Bim"), "L1 data misses": ("D1mr", "D1mw"),
          "last-level data misses": ("DLmr", "DLmw")}


def jit_events(out: Path) -> dict[str, int]:
    """cachegrind's events summed over the code without symbols (``???``): numba's compiled
    functions, which the kernel is nearly all of; the interpreter, numpy and the libraries have
    symbols. Counting the whole process instead moved a run's instructions per flow-step by
    up to ~25 % between identical runs (the interpreter's start-up and teardown)."""
    names: list[str] = []
    got: collections.Counter[str] = collections.Counter()
    fn = None
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("fn="):
            fn = line[3:]
        elif fn == "???" and line[:1].isdigit():
            # (a line may leave out its trailing zero counts)
            for name, v in zip(names, line.split()[1:], strict=False):
                got[name] += int(v)
    return got


def cachegrind(nics: int, tmp: Path) -> dict[str, float]:
    """Per live flow-step of ``_a2a(nics)`` run to the end, what cachegrind counts in the
    compiled kernel (less a one-step run: the kernel's load and the set-up's compiled code).

    The kernel is compiled natively, for this host's CPU name and features stated to numba, so
    valgrind (which presents another CPU) runs the build the project runs here from the cache."""
    import llvmlite.binding as llvm

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "count-cache"), PYTHONHASHSEED="0",
               NUMBA_CPU_NAME=llvm.get_host_cpu_name(),
               NUMBA_CPU_FEATURES=llvm.get_host_cpu_features().flatten(),
               PYTHONPATH=os.pathsep.join([str(ROOT / "bench"), str(ROOT)]))
    child = [sys.executable, "-c", _COUNT_CHILD, str(nics)]
    counted = subprocess.run(child + ["count"], env=env, cwd=tmp, check=True,
                             capture_output=True, text=True).stdout  # compiles into the cache
    flow_steps = int(counted.split()[1])

    def counts(mode: str) -> dict[str, int]:
        out = tmp / f"cg-{nics}-{mode}.out"
        r = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                            "--branch-sim=yes", f"--cachegrind-out-file={out}", *child, mode],
                           env=env, cwd=tmp, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"cachegrind, {nics} NICs, {mode}: exit {r.returncode}: "
                             f"{r.stderr[-500:]}")
        events = jit_events(out)
        if "Ir" not in events or "Bcm" not in events:
            raise SystemExit(f"cachegrind, {nics} NICs: no compiled code counted in {out}")
        return {k: sum(events[e] for e in ev) for k, ev in COUNTS.items()}

    one, full = counts("one"), counts("full")
    return {"nics": nics, "flow_steps": flow_steps,
            **{k: (full[k] - one[k]) / max(1, flow_steps) for k in COUNTS}}


def debug_copy(dst: Path) -> Path:
    """rocesim and the bench's scenarios copied into ``dst``, the kernel's numba decorators with
    line numbers; returns the copy's _kernel.py (its lines are the original's)."""
    shutil.copytree(ROOT / "rocesim", dst / "rocesim",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (dst / "bench").mkdir()
    for name in ("rocesim_bench.py", "doc_sections.py"):
        shutil.copy(ROOT / "bench" / name, dst / "bench" / name)
    kernel = dst / "rocesim" / "_kernel.py"
    src = kernel.read_text()
    if DECORATOR not in src:
        raise SystemExit(f"rocesim/_kernel.py has no {DECORATOR!r} left to add line numbers to")
    kernel.write_text(src.replace(DECORATOR, DECORATOR + " debug=True, boundscheck=False,"))
    return kernel


def line_table(obj: Path) -> tuple[list[int], list[int | None], int]:
    """Offsets of ``run``'s instructions from its start, the source line of each, and the
    function's length in bytes."""
    dis = subprocess.run(["objdump", "-d", "-l", "--no-show-raw-insn", str(obj)],
                         capture_output=True, text=True, check=True).stdout
    offs: list[int] = []
    lines: list[int | None] = []
    line: int | None = None
    inside, start = False, 0
    for text in dis.splitlines():
        if re.match(r"^[0-9a-f]{16} <", text):
            if inside:
                break
            inside = "<_ZN7rocesim7_kernel3run" in text  # not its CPython wrapper
            start = int(text[:16], 16)
            continue
        if not inside:
            continue
        m = re.match(r"^/\S+_kernel\.py:(\d+)", text)
        if m:
            line = int(m.group(1))
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s", text)
        if m:
            offs.append(int(m.group(1), 16) - start)
            lines.append(line)
    if not offs:
        raise SystemExit(f"objdump found no instructions of run in {obj}")
    return offs, lines, offs[-1] + 16


def functions_of(source: list[str]) -> dict[int, str]:
    """The function each line number of ``source`` is in."""
    out, cur = {}, "?"
    for i, text in enumerate(source, 1):
        m = re.match(r"def (\w+)", text)
        if m:
            cur = m.group(1)
        out[i] = cur
    return out


def profile(name: str, runs: int, tmp: Path) -> dict:
    kernel = debug_copy(tmp / name)
    obj, data = tmp / f"{name}.o", tmp / f"{name}.perf"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / f"{name}-cache"),
               PYTHONPATH=os.pathsep.join([str(tmp / name / "bench"), str(tmp / name)]))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, name, str(runs), str(obj)],
                             cwd=tmp / name, env=env, text=True, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    ready = child.stdout.readline().split()
    if ready[:1] != ["ready"]:
        child.kill()
        raise SystemExit(f"{name}: the scenario's process did not start (exit {child.wait()})")
    addr = int(ready[1])
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "2999", "-p", str(child.pid),
                             "-o", str(data)], stderr=subprocess.PIPE)
    time.sleep(1.0)  # perf attaches
    child.stdin.write("go\n")
    child.stdin.flush()
    walls = [float(t.split()[1]) for t in child.stdout if t.startswith("wall")]
    child.wait()
    if perf.poll() is None:
        perf.send_signal(signal.SIGINT)
    perf_rc = perf.wait()
    if not data.exists():
        raise SystemExit(f"{name}: perf record failed (exit {perf_rc}; perf_event_paranoid "
                         f"above 2?): {perf.stderr.read().decode()[-500:] if perf.stderr else ''}")
    ips = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip"], capture_output=True,
                         text=True, check=True).stdout.split()
    offs, lines, size = line_table(obj)
    source = kernel.read_text().splitlines()
    fn_of = functions_of(source)
    by_line: collections.Counter[int] = collections.Counter()
    for ip in ips:
        off = int(ip, 16) - addr
        if 0 <= off < size:
            line = lines[bisect.bisect_right(offs, off) - 1]
            if line:
                by_line[line] += 1
    in_run = sum(by_line.values())
    by_fn: collections.Counter[str] = collections.Counter()
    for line, n in by_line.items():
        by_fn[fn_of.get(line, "?")] += n
    return {"name": name, "walls": walls, "samples": len(ips), "in_run": in_run,
            "by_fn": by_fn, "by_line": by_line, "source": source, "fn_of": fn_of}


def render_counts(rows: list[dict[str, float]]) -> list[str]:
    out = ["", "Counted by cachegrind (simulated; the L1 and last-level caches as valgrind "
           "takes them from this host) in the compiled code alone, per live flow-step of the "
           "scaling curve's all-to-all, on the kernel as the project builds it on this host:",
           "",
           "| NICs | live flow-steps | " + " | ".join(COUNTS) + " |",
           "|---|---|" + "---|" * len(COUNTS)]
    for r in rows:
        out.append(f"| {r['nics']:.0f} | {r['flow_steps']:,.0f} | "
                   + " | ".join(f"{r[k]:.3g}" for k in COUNTS) + " |")
    return out


def render(profiles: list[dict], runs: int, machine: str,
           counted: list[dict[str, float]]) -> str:
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cols = [NAMES.get(p["name"], p["name"]) for p in profiles]
    out = [
        "## Where the kernel spends its time", "",
        f"Produced by `bench/kernel_profile.py` on {now} on {machine}: perf samples (2999 Hz) "
        f"of {runs} runs of each scenario of the rocesim section, with a build of the kernel "
        "that carries line numbers; each sample inside `run` is attributed to the line of "
        "rocesim/_kernel.py it executes and to the function that line is in (the helpers are "
        "inlined into `run`). Shares are of the samples inside `run`. A sample lands on the "
        "instruction after the one that stalled, and optimised code interleaves lines: read a "
        "line's share as its neighbourhood's.", "",
        "| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),
        "| runs' wall s (this build) | " + " | ".join(
            ", ".join(f"{w:.2f}" for w in p["walls"]) for p in profiles) + " |",
        "| samples in `run` / in the process | " + " | ".join(
            f"{p['in_run']} / {p['samples']}" for p in profiles) + " |",
    ]
    total: collections.Counter[str] = collections.Counter()
    for p in profiles:
        for fn, n in p["by_fn"].items():
            total[fn] += n / max(1, p["in_run"])
    for fn, _ in total.most_common():
        shares = [p["by_fn"].get(fn, 0) / max(1, p["in_run"]) for p in profiles]
        if max(shares) < 0.005:
            continue
        out.append(f"| `{fn}` | " + " | ".join(f"{100 * s:.1f} %" for s in shares) + " |")
    out += render_counts(counted)
    out += ["", TRIED]
    for p in profiles:
        out += ["", f"{NAMES.get(p['name'], p['name'])}, the {TOP_LINES} hottest lines:", "",
                "| share | line | function | code |", "|---|---|---|---|"]
        for line, n in p["by_line"].most_common(TOP_LINES):
            code = p["source"][line - 1].strip().split("  #")[0].replace("|", "\\|")
            out.append(f"| {100 * n / max(1, p['in_run']):.1f} % | {line} | "
                       f"`{p['fn_of'].get(line, '?')}` | `{code}` |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # no ``choices``: Python 3.11's argparse checks an empty nargs="*" positional against them
    ap.add_argument("scenarios", nargs="*", help=f"of {', '.join(NAMES)} (default: s2 s3)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each scenario under perf")
    ap.add_argument("--count", type=int, nargs="*", default=[64, 128], metavar="NICS",
                    help="all-to-all sizes to count instructions on (cachegrind)")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch the docs")
    args = ap.parse_args()
    unknown = sorted(set(args.scenarios) - set(NAMES))
    if unknown:
        ap.error(f"no scenario {', '.join(unknown)} (choose from {', '.join(NAMES)})")
    for tool in ("perf", "objdump", "valgrind"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    with tempfile.TemporaryDirectory(prefix="kernel-profile-") as tmp:
        profiles = [profile(name, max(1, args.runs), Path(tmp))
                    for name in args.scenarios or ["s2", "s3"]]
        counted = [cachegrind(n, Path(tmp)) for n in args.count]
    text = render(profiles, max(1, args.runs), _machine(), counted)
    print(text)
    if not args.no_write:
        write_section(DOC, START, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
