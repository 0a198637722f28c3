"""Fault-injection suite: shared fixtures and the reliability recorder.

Every fault test ends by calling ``reliability.record(...)`` with what it *measured*: how many
canary targets were left off the baseline, how many completed trials were lost, the time from
the fault to the verified restore. With ``ECNTUNE_RELIABILITY_JSON=<file>`` set (as
``bench/reliability.py`` does) the rows are appended to that file as JSON lines, together with
the test's node id, so the report can join them with pytest's own pass/fail verdict.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from safety.journal import Journal

ENV = "ECNTUNE_RELIABILITY_JSON"
ECNTUNE = [sys.executable, "-m", "tuner"]

SIM_YAML = """
name: {name}
fabric:
  backend: sim
  topology: {{kind: leaf_spine, leaves: 2, spines: 1, hosts_per_leaf: 4, nic_gbps: 100,
             uplink_gbps: 100, buffer_bytes: 12582912}}
  seed: 1
  max_time_us: {max_time_us}
  step_us: 250
canary: {{switches: [leaf0]}}
workload:
  time_limit_s: 120
  parts:
    - {{kind: collective, op: alltoall, size_bytes: 4194304, iterations: {iterations}}}
    - {{kind: probe, size_bytes: 64, interval_us: 20, pairs: 2}}
search:
  knobs:
    kmin_bytes: {{low: 20000, high: 200000, log: true}}
    kmax_ratio: {{low: 1.5, high: 4, log: true}}
    pmax_percent: {{low: 5, high: 50}}
    rpg_ai_rate: {{low: 1, high: 100, log: true}}
  warm_starts: false
safety:
  max_pause_fraction: 1.0
  poll_interval_s: 0.00025
objective: {{guardrails: {{max_busbw_loss_percent: 100, p99_allowance_percent: 1000000,
            max_pfc_pause_us_per_s: 1000000}}}}
budget: {{trials: {trials}, wall_time_s: 600, repeats: 1, baseline_every: 0, confirm_repeats: 5,
         confirm_top_k: 1, candidate_placements: 0}}
sampler: {{name: random, seed: 3}}
tracking: {{enabled: false}}
results_dir: {results}
"""


@dataclass
class Row:
    fault: str
    action: str
    dirty_targets: int
    trials_lost: int
    restore_s: float | None
    backend: str
    nodeid: str = ""
    command: str = ""  # how to run just this row's test


class Recorder:
    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.command = f"pytest {'-m slow ' if slow else ''}'{nodeid}'"
        self.rows: list[Row] = []

    def record(self, fault: str, action: str, *, dirty_targets: int, trials_lost: int,
               restore_s: float | None, backend: str = "sim") -> None:
        row = Row(fault, action, dirty_targets, trials_lost,
                  None if restore_s is None else round(restore_s, 3), backend, self.nodeid,
                  self.command)
        self.rows.append(row)
        path = os.environ.get(ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(row)) + "\n")


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node.nodeid, request.node.get_closest_marker("slow") is not None)


def sim_experiment(tmp_path: Path, *, name: str = "faults", trials: int = 6,
                   max_time_us: int = 20_000, iterations: int = 3) -> Path:
    """A small sim experiment whose proposals all pass the static limits (so they apply)."""
    results = tmp_path / "results"
    path = tmp_path / f"{name}.yaml"
    path.write_text(SIM_YAML.format(name=name, trials=trials, max_time_us=max_time_us,
                                    iterations=iterations, results=results))
    return path


def start_run(exp: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*ECNTUNE, "run", str(exp), "--quiet", "--no-mlflow", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=exp.parent)


def freeze_when(proc: subprocess.Popen[str], pred, timeout_s: float = 60.0) -> bool:
    """SIGSTOP ``proc`` at a moment ``pred()`` holds, checked again while it is stopped, so a
    signal sent next finds that state (checking and then signalling a running process races:
    a 0.3 s sleep after seeing an open change let the change close first). Returns with the
    process stopped, or False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not wait_until(pred, deadline - time.monotonic()):
            return False
        proc.send_signal(signal.SIGSTOP)
        if pred():
            return True
        proc.send_signal(signal.SIGCONT)
    return False


def wait_until(pred, timeout_s: float, interval_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval_s)
    return False


def change_journalled(journal) -> bool:
    """A run's first change is in its journal, whole: the file exists from its open, before
    its first record is written (read then: no entry, or a torn line)."""
    from safety.journal import JournalUnreadable

    try:
        return journal.path.exists() and journal.dirty() is not None
    except JournalUnreadable:
        return False


def finished_trials(results: Path) -> dict[int, str]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = f"sqlite:///{results / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage=storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return {t.number: t.state.name for t in study.get_trials(deepcopy=False)}


def all_finished(results: Path) -> dict[tuple[str, int], str]:
    """``{(study, trial number): state}`` over every study in the results folder."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = f"sqlite:///{results / 'optuna.db'}"
    out = {}
    for summary in optuna.get_all_study_summaries(storage=storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        out.update({(summary.study_name, t.number): t.state.name
                    for t in study.get_trials(deepcopy=False)})
    return out


def lost_trials(results: Path, measured_only: bool = False) -> int:
    """Trials the tuner itself closed in the journal (restored after measuring) that Optuna
    does not hold as finished: a completed trial lost by the fault. The trial in flight when
    the tuner died (closed later by ``recover``) never completed and is not counted; with
    ``measured_only`` neither is one the study stopped on before measuring it (no
    ``<study>/trial-NNNN.json``)."""
    closed = {(e.study, e.trial) for e in Journal(results / "journal.jsonl").entries()
              if any(o in ("restored", "kept") for o in e.outcomes)}
    if measured_only:
        closed = {(s, n) for s, n in closed
                  if (results / s / f"trial-{n:04d}.json").exists()}
    states = all_finished(results)
    return sum(1 for k in closed if states.get(k) not in ("COMPLETE", "PRUNED", "FAIL"))


@pytest.fixture
def emu(emulated_cluster):
    yield emulated_cluster
    for name in emulated_cluster.targets:  # hung stand-ins and timers die with the test
        emulated_cluster.clear_faults(name)
        emulated_cluster.kill_sessions(name)
