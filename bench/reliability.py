"""Run the fault-injection suite and write docs/reliability.md from what it measured.

    .venv/bin/python bench/reliability.py            # whole suite, slow tests included
    .venv/bin/python bench/reliability.py --records R.jsonl --junit J.xml   # re-render only
    .venv/bin/python bench/reliability.py --only tests/faults/test_reboot.py   # these rows

``--only`` runs just the given tests (files or node ids) and replaces their rows in the
existing table -- and drops rows whose test no longer exists -- keeping every other row as it
was; the header says which rows come from which run.

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
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from doc_sections import kept_section  # noqa: E402

SUITES = ["tests/faults", "tests/inputs"]


def run_suite(records: Path, junit: Path, marker: str, tests: list[str] | None = None) -> int:
    env = {**os.environ, "ECNTUNE_RELIABILITY_JSON": str(records)}
    cmd = [sys.executable, "-m", "pytest", *(tests or SUITES), "-q", "-p", "no:cacheprovider",
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


_NODEID = re.compile(r"`pytest (?:-m slow )?'?(tests/[^'`]+?)'?`")


def _row_nodeid(line: str) -> str | None:
    m = _NODEID.search(line.rsplit("|", 2)[-2]) if line.count("|") > 2 else None
    return m.group(1) if m else None


def _test_exists(nodeid: str) -> bool:
    """The test function of a row's node id is still in its file."""
    path, _, name = nodeid.partition("::")
    name = name.split("[", 1)[0]
    try:
        return not name or f"def {name}(" in (ROOT / path).read_text()
    except OSError:
        return False


def kept_rows(old_doc: str, replaced: list[str],
              results: dict[str, tuple[str, float]] | None = None,
              recorded: set[str] | None = None) -> tuple[list[str], int]:
    """Table lines of an earlier report to keep as they are: every row but those of the
    re-run tests (``replaced``: files or node ids) and of tests that no longer exist. A re-run
    test that did not pass and recorded nothing keeps its row, marked as not passing.
    Returns (lines, index where the re-run rows go)."""
    table = old_doc.split("|---|", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    kept: list[str] = []
    at: int | None = None
    for line in table.splitlines():
        nodeid = _row_nodeid(line)
        gone = nodeid is not None and (
            any(nodeid == r or nodeid.startswith(r.rstrip("/") + ("" if "::" in r else "::"))
                or nodeid.startswith(r + "[") or nodeid.startswith(r.rstrip("/") + "/")
                for r in replaced)
            or not _test_exists(nodeid))
        state = (results or {}).get(nodeid or "", ("passed", 0.0))[0]
        if gone and state != "passed" and nodeid not in (recorded or set()) \
                and _test_exists(nodeid or ""):
            cells = line.split(" | ")
            kept.append(" | ".join([*cells[:2], f"**{state.upper()}**", "?", "?", "?",
                                    cells[-1]]))
        elif gone:
            at = len(kept) if at is None else at
        else:
            kept.append(line)
    inputs = next((i for i, ln in enumerate(kept) if "malformed" in ln), len(kept))
    return kept, inputs if at is None else at


def render(rows: list[dict], results: dict[str, tuple[str, float]], command: str,
           kept: tuple[list[str], int] | None = None, kept_from: str = "") -> str:
    lines = [
        "# Reliability: fault injection",
        "",
        "Produced by `bench/reliability.py` from the fault-injection suite (`tests/faults`, "
        "`tests/inputs`); do not edit by hand.",
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}`"
        + (f" (the rows of those tests; every other row as generated {kept_from})."
           if kept is not None else "."),
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
    head = len(lines)
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
    n_rows = len(rows) + (1 if inputs else 0)
    if kept is not None:
        old, at = kept
        lines[head:head] = old[:at]
        lines += old[at:]
        n_rows += len(old)
        bad += sum(1 for ln in old if "**FAILED" in ln or "**NOT RUN" in ln)
    lines += ["", f"Rows: {n_rows}; rows not passing: {bad}."]
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
        "heal the canary (`safety/deadman.py`), or only NVUE's own `nv config apply --confirm` "
        "window; `reboot` (the target's processes die, its `/run` empties and each device "
        "boots from its own source: SONiC from the saved `config_db.json`, NVUE from the "
        "startup revision, an mlx5 NIC from the firmware's DCQCN values plus enabled boot "
        "units -- or, the worst case, keeps everything), with a baseline its boot source does "
        "not hold; a runtime directory pre-created by `nobody`; a second tuner with its own "
        "results folder.",
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
    ap.add_argument("--only", nargs="+", metavar="TEST",
                    help="run only these tests (files or node ids) and replace their rows")
    args = ap.parse_args(argv)
    marker = "not slow and not browser" if args.fast else "not browser"
    kept, kept_from = None, ""
    if args.only:
        old = args.out.read_text(encoding="utf-8")
        when = re.search(r"^Generated (.+)\.$", old, re.M)
        if args.records and args.junit:
            records, junit, rc = args.records, args.junit, 0
        else:
            tmp = Path(tempfile.mkdtemp(prefix="ecntune-reliability-"))
            records, junit = tmp / "records.jsonl", tmp / "junit.xml"
            rc = run_suite(records, junit, "not browser", args.only)
        recorded = {json.loads(x)["nodeid"] for x in records.read_text().splitlines()
                    if x.strip()} if records.exists() else set()
        kept = kept_rows(old, args.only, verdicts(junit), recorded)
        command = f"python bench/reliability.py --only {' '.join(args.only)}"
        # the oldest date in the old header: earlier --only runs are not nested into this one
        dates = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", when.group(1)) if when else []
        kept_from = (f"by earlier runs, the oldest on {min(dates)}" if dates
                     else "by an earlier run")
    elif args.records and args.junit:
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
    text = render(rows, verdicts(junit), command, kept, kept_from)
    # the sections bench/stress.py and bench/redteam.py own
    kept_others = "".join(kept_section(args.out, f"<!-- {name}:start -->", f"<!-- {name}:end -->")
                          for name in ("stress", "redteam"))
    args.out.write_text(text + kept_others, encoding="utf-8")
    print(f"wrote {args.out} ({len(rows)} fault rows); pytest exit code {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
