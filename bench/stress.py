"""Run the README's default test command N times beside K CPU-bound processes, and write what
failed (and the wall time of each run) to docs/reliability.md's "Flakes under load" section.

    .venv/bin/python bench/stress.py --runs 5 --hogs 2      # about 75 min on 2 cores

A flaky test costs a whole stop (CI must be green), and a loaded machine is where the timing
assumptions of a test show: a busy CI host, or a test runner beside a build. Each run is a
fresh ``pytest -n 2 --dist loadfile`` (the README's command, without its install step) with
``hogs`` processes spinning beside it; a failure is listed with its test id and first error
line, so its cause can be read off and fixed by a rule, never retried away. The "why" of each
failure is written by hand between the markers afterwards: the script cannot know it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
START, END = "<!-- stress:start -->", "<!-- stress:end -->"
TEST_COMMAND = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-q",
                "-p", "no:cacheprovider"]
_FAILED = re.compile(r"^FAILED (\S+)(?: - (.*))?$", re.M)
# the last line: "1204 passed, 2 warnings in 517.27s (0:08:37)", "=" framed when any failed
_SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed).*?) in [\d.]+s", re.M)


def hog() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while 1: pass"])


@dataclass(frozen=True)
class Run:
    rc: int
    wall_s: float
    summary: str
    failed: list[tuple[str, str]]  # (test id, first error line)


def one_run(hogs: int) -> Run:
    spinning = [hog() for _ in range(hogs)]
    t0 = time.monotonic()
    try:
        res = subprocess.run(TEST_COMMAND, cwd=ROOT, capture_output=True, text=True)
    finally:
        for p in spinning:
            p.kill()
            p.wait()
    out = res.stdout + res.stderr
    summary = _SUMMARY.findall(out)
    return Run(res.returncode, time.monotonic() - t0,
               summary[-1] if summary else "no pytest summary",
               [(m[0], (m[1] or "")[:160]) for m in _FAILED.findall(out)])


def section(runs: list[Run], hogs: int, commit: str, when: str) -> str:
    lines = ["## Flakes under load",
             "",
             f"Produced by `bench/stress.py --runs {len(runs)} --hogs {hogs}` on {when} at "
             f"commit {commit} ({platform.machine()}, {os.cpu_count()} cores shared, Python "
             f"{platform.python_version()}): the README's default test command, each run "
             f"beside {hogs} CPU-bound processes.",
             "", "| run | exit | wall | pytest summary | failed |", "|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        failed = "; ".join(f"`{t}` ({why})" for t, why in r.failed) or "none"
        lines.append(f"| {i} | {r.rc} | {r.wall_s / 60:.1f} min | {r.summary} | {failed} |")
    if any(r.failed for r in runs):
        lines += ["", "Why each failure happened, and the rule that fixed it (by hand):", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=2)
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "?"
    runs: list[Run] = []
    for i in range(a.runs):
        runs.append(one_run(a.hogs))
        print(f"run {i + 1}: exit {runs[-1].rc}, {runs[-1].summary}", flush=True)
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    from doc_sections import write_section

    write_section(DOC, START, END, section(runs, a.hogs, commit, when))
    print(f"wrote {DOC}")
    return 0 if all(r.rc == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
