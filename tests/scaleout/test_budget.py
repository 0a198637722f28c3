"""The shared budget of a study's workers (``tuner.worker.budget_step``): a dead worker's trial
counts once, by its re-queued copy; a re-queued copy is always run; a worker with the budget
spent waits while trials run elsewhere (their workers may die) and stops only when nothing runs
or waits to be re-run."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from tuner.worker import budget_step

S = TrialState


def trial(number: int, state: TrialState, role: str = "proposal", verdict: str | None = None,
          failed_trial: int | None = None) -> Any:
    ua: dict[str, Any] = {"role": role}
    if verdict:
        ua["verdict"] = verdict
    sa: dict[str, Any] = {}
    if failed_trial is not None:
        sa = {"failed_trial": failed_trial, "retry_history": [failed_trial]}
    t = optuna.trial.create_trial(
        state=state, value=1.0 if state == S.COMPLETE else None, params={"x": 1},
        distributions={"x": IntDistribution(0, 2)}, user_attrs=ua, system_attrs=sa)
    t.number = number
    return t


BASE = [trial(0, S.COMPLETE, role="baseline"), trial(1, S.COMPLETE, role="baseline")]


def test_ask_until_the_budget_counts_running_and_finished_searched_trials() -> None:
    assert budget_step(BASE, 2) == "ask"
    assert budget_step([*BASE, trial(2, S.COMPLETE)], 2) == "ask"
    assert budget_step([*BASE, trial(2, S.COMPLETE), trial(3, S.PRUNED)], 2) == "stop"
    assert budget_step([*BASE, trial(2, S.FAIL, verdict="rolled_back:pfc")], 1) == "stop"
    # An interrupted trial (SIGTERM, resume) gives its budget back.
    assert budget_step([*BASE, trial(2, S.FAIL, verdict="interrupted")], 1) == "ask"
    # A WAITING warm start is not spent budget yet.
    assert budget_step([*BASE, trial(2, S.WAITING, role="warm:x")], 1) == "ask"


def test_a_spent_budget_waits_while_trials_run_elsewhere() -> None:
    assert budget_step([*BASE, trial(2, S.COMPLETE), trial(3, S.RUNNING)], 2) == "wait"
    # Its worker died: failed, re-queued; the copy must be run although the count is reached.
    died = [*BASE, trial(2, S.COMPLETE), trial(3, S.FAIL, verdict="failed:worker_died"),
            trial(4, S.WAITING, failed_trial=3)]
    assert budget_step(died, 2) == "ask"
    # Once the copy runs it counts in its original's place: the budget is spent exactly.
    ran = [*died[:-1], trial(4, S.RUNNING, failed_trial=3)]
    assert budget_step(ran, 2) == "wait"
    assert budget_step([*died[:-1], trial(4, S.COMPLETE, failed_trial=3)], 2) == "stop"
    # Before the copy exists the failed original still counts: no extra ask. (A janitor fails
    # and re-queues under its worker's lock, which that worker's own check takes too, and any
    # other worker that stops here leaves the copy to the live janitor's worker.)
    assert budget_step(died[:-1], 2) == "stop"
