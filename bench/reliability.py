"""Run the fault-injection suite and write docs/reliability.md from what it measured.

    .venv/bin/python bench/reliability.py            # whole suite, slow tests included
    .venv/bin/python bench/reliability.py --records R.jsonl --junit J.xml   # re-render only

Every fault test records (``tests/faults/conftest.py``) what it measured -- canary targets left
off the baseline, completed trials lost, time from the fault to the verified restore -- in a
JSON-lines file named by ``ECNTUNE_RELIABILITY_JSON``; pytest's junit XML gives each test's
verdict. A row whose test did not pass is shown as FAILED with unknown numbers: the table only
states what a passing test proved. The malformed-input cases (``tests/inputs``) are one row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = ["tests/faults", "tests/inputs"]


def run_suite(records: Path, junit: Path, marker: str) -> int:
    env = {**os.environ, "ECNTUNE_RELIABILITY_JSON": str(records)}
    cmd = [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider",
           "-m", marker, f"--junitxml={junit}"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def verdicts(junit: Path) -> dict[str, tuple[str, float]]:
    """``{nodeid: (passed|failed|skipped, seconds)}`` from pytest's junit XML."""
    out: dict[str, tuple[str, float]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        nodeid = f"{path}.py::{case.get('name')}"
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
            elif child.tag == "skipped":
                state = "skipped"
        out[nodeid] = (state, float(case.get("time", 0.0)))
    return out


def _fmt_s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} s"


def render(rows: list[dict], results: dict[str, tuple[str, float]], command: str) -> str:
    lines = [
        "# Reliability: fault injection",
        "",
        "Produced by `bench/reliability.py` from the fault-injection suite (`tests/faults`, "
        "`tests/inputs`); do not edit by hand.",
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}`.",
        "",
        "Every row is one test that injected the fault into a real run (real `ecntune` "
        "processes or the real cluster stack; the SSH rows against the emulated cluster: one "
        "`sshd` per host/switch on 127.0.10.x) and then *measured* the outcome: the canary is "
        "read back (over SSH, or from the simulated devices' state file) and compared with the "
        "journal's baseline; trials are counted in the Optuna storage. *Time to restore* runs "
        "from the fault to the verified restore (for exit-4 rows: until `ecntune recover` "
        "finished after the fault was cleared).",
        "",
        "The *test* column is the command that runs the row's test alone (`-m slow` for the "
        "long ones, which the default `pytest` run leaves out).",
        "",
        "| fault | backend | what the tool did | canary targets left dirty | trials lost "
        "| time to restore | test |",
        "|---|---|---|---|---|---|---|",
    ]
    seen: set[str] = set()
    bad = 0
    for r in rows:
        state = results.get(r["nodeid"], ("not run", 0.0))[0]
        seen.add(r["nodeid"])
        if state != "passed":
            bad += 1
            lines.append(f"| {r['fault']} | {r['backend']} | **{state.upper()}** | ? | ? | ? "
                         f"| `{r['nodeid']}` |")
            continue
        lines.append(f"| {r['fault']} | {r['backend']} | {r['action']} | {r['dirty_targets']} "
                     f"| {r['trials_lost']} | {_fmt_s(r['restore_s'])} "
                     f"| `{r.get('command') or r['nodeid']}` |")
    inputs = {k: v for k, v in results.items() if "test_hostile_inputs.py::test_malformed" in k}
    if inputs:
        ok = sum(1 for s, _ in inputs.values() if s == "passed")
        worst = max(t for _, t in inputs.values())
        ids = [k.split("[", 1)[1].rstrip("]") for k in inputs]
        files = {i.rsplit("-", 1)[0] for i in ids}
        commands = sorted({i.rsplit("-", 1)[1] for i in ids})
        state = "" if ok == len(inputs) else f" **{len(inputs) - ok} FAILED**"
        bad += len(inputs) - ok
        lines.append(
            f"| {len(files)} malformed experiment/inventory files (`tests/inputs/files/`, "
            f"each named after what is wrong), each through `ecntune "
            f"{'`/`'.join(commands)}` | sim + ssh | exit code 2 and one short message naming "
            f"the file, the field and the fix, before any backend touches a target{state} "
            f"| 0 | 0 | n/a (slowest case {worst:.1f} s) "
            "| `pytest tests/inputs/test_hostile_inputs.py` |")
    missing = [k for k, (s, _) in results.items() if s == "failed" and k not in seen
               and k not in inputs]
    lines += ["", f"Rows: {len(rows) + (1 if inputs else 0)}; rows not passing: {bad}."]
    if missing:
        lines += ["", "Other failing tests of the suite: " + ", ".join(f"`{m}`" for m in
                                                                      missing)]
    lines += [
        "",
        "## How each fault is injected",
        "",
        "* sim backend: the tuner is a real `ecntune run` process, killed with SIGKILL, "
        "SIGTERM or SIGINT while a trial's settings are applied and measured; the simulated "
        "devices keep their state across processes (`tuner/cluster/statefile.py`), as a real "
        "fabric does.",
        "* SSH backend: `EmulatedCluster` hooks -- `stop_target` (host unreachable), "
        "`inject(refuse_write=...)` (the sysfs write fails like the firmware), "
        "`kill_sessions` (SSH dropped), `inject(hang=...)` (a hung `mpirun`), "
        "`inject(pfc_storm=..., lossless_drops=..., link_down=...)` (counters and link state), "
        "`rotate_host_key`; the tuner itself SIGKILLed with only the dead-man timers left to "
        "heal the canary (`safety/deadman.py`); `reboot` (the target's processes die and its "
        "`/run` empties, device settings stay); a runtime directory pre-created by `nobody`; "
        "a second tuner with its own results folder.",
        "* the journal and the lock: a torn last record (the file cut in the middle of its "
        "last line), a 16 KiB tmpfs under the journal that fills up mid-study, two `ecntune "
        "run` processes on one results folder.",
        "* tracking and secrets: a real `mlflow server` SIGKILLed mid-study; secrets planted "
        "in every experiment field that can hold one, then every file written and all console "
        "output searched for them.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, help="existing records (skip running the suite)")
    ap.add_argument("--junit", type=Path, help="existing junit XML (with --records)")
    ap.add_argument("--fast", action="store_true", help="default-run tests only (no slow)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    args = ap.parse_args(argv)
    marker = "not slow and not browser" if args.fast else "not browser"
    if args.records and args.junit:
        records, junit, rc = args.records, args.junit, 0
        command = "bench/reliability.py --records ... --junit ..."
    else:
        tmp = Path(tempfile.mkdtemp(prefix="ecntune-reliability-"))
        records, junit = tmp / "records.jsonl", tmp / "junit.xml"
        rc = run_suite(records, junit, marker)
        command = "python bench/reliability.py" + (" --fast" if args.fast else "")
    rows = [json.loads(x) for x in records.read_text().splitlines() if x.strip()] \
        if records.exists() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, verdicts(junit), command), encoding="utf-8")
    print(f"wrote {args.out} ({len(rows)} fault rows); pytest exit code {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
