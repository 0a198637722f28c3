"""Fixtures for the loop tests: a pre-built MLflow SQLite store (creating one takes ~7 s, so it
is built once per session and copied), tiny experiments and a spying simulated cluster."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tuner.experiment import Experiment, parse_experiment

TINY_YAML = """
name: tiny
fabric:
  backend: sim
  topology: {{kind: leaf_spine, leaves: 2, spines: 1, hosts_per_leaf: 4,
             buffer_bytes: {buffer_bytes}}}
  seed: 1
  max_time_us: 6000
  step_us: 250
canary: {{switches: [leaf0]}}
workload:
  time_limit_s: 60
  parts:
    - {{kind: collective, op: alltoall, size_bytes: 4194304, iterations: 2, weight: 2}}
    - {{kind: background, pattern: incast, load: 1.0, fan_in: 3, priority: roce}}
    - {{kind: probe, size_bytes: 64, interval_us: 20, pairs: 2}}
search:
  knobs:
    kmin_bytes: {{low: {kmin_low}, high: {kmin_high}, log: true}}
    kmax_ratio: {{low: {ratio_low}, high: {ratio_high}, log: true}}
    pmax_percent: {{low: {pmax_low}, high: {pmax_high}, log: true}}
    rpg_ai_rate: {{low: {ai_low}, high: {ai_high}, log: true}}
  warm_starts: {warm}
safety:
  max_pause_fraction: {max_pause_fraction}
  xoff_margin_percent: {xoff_margin}
  poll_interval_s: 0.00025
objective: {{mode: {mode}, guardrails: {{max_busbw_loss_percent: 100,
            max_tenant_loss_percent: {tenant_loss}, max_pfc_pause_us_per_s: {pfc_budget},
            p99_allowance_percent: {p99_allowance}}}}}
budget: {{trials: {trials}, wall_time_s: 300, repeats: {repeats}, baseline_every: 0,
         confirm_top_k: {top_k}, confirm_repeats: {confirm},
         candidate_placements: {placements}}}
sampler: {{name: random, seed: {seed}}}
results_dir: {results}
"""


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def results(tmp_path: Path, mlflow_template: Path) -> Path:
    r = tmp_path / "results"
    r.mkdir()
    shutil.copy(mlflow_template, r / "mlflow.db")
    return r


@pytest.fixture
def tiny(results: Path) -> Callable[..., tuple[Experiment, str]]:
    def make(trials: int = 3, max_pause_fraction: float = 1.0, xoff_margin: float = 20.0,
             seed: int = 0, buffer_bytes: int = 12 * 2**20, kmin: tuple[int, int] = (5000, 10**6),
             ratio: tuple[float, float] = (1.5, 10.0), pmax: tuple[int, int] = (1, 100),
             ai: tuple[int, int] = (1, 200), mode: str = "primary", repeats: int = 1,
             warm: bool = False, confirm: int = 5, top_k: int = 1,
             pfc_budget: float = 1e6, tenant_loss: float = 100.0,
             p99_allowance: float = 1e6, placements: int = 0) -> tuple[Experiment, str]:
        text = TINY_YAML.format(trials=trials, max_pause_fraction=max_pause_fraction,
                                xoff_margin=xoff_margin, seed=seed, results=results,
                                buffer_bytes=buffer_bytes, kmin_low=kmin[0], kmin_high=kmin[1],
                                ratio_low=ratio[0], ratio_high=ratio[1], pmax_low=pmax[0],
                                pmax_high=pmax[1], ai_low=ai[0], ai_high=ai[1], mode=mode,
                                repeats=repeats, warm=str(warm).lower(), confirm=confirm,
                                top_k=top_k, pfc_budget=pfc_budget, tenant_loss=tenant_loss,
                                p99_allowance=p99_allowance, placements=placements)
        return parse_experiment(text, "tiny.yaml"), text

    return make
