"""What the lifecycle commands need from a finished study, read through ``tuner.study`` (the one
winner policy): the confirmed winner's knob values, the baseline's, the canary, the experiment
stored with the study and the winner's paired confirmation. Read-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner import study_store
from tuner.errors import ConfigError, NoWinner

if TYPE_CHECKING:
    from tuner.experiment import Experiment
    from tuner.study import CandidateCheck, TrialOutcome


@dataclass(frozen=True)
class StudyWinner:
    study: str
    storage: str
    experiment: Experiment
    trial: int
    values: dict[str, int]
    baseline: dict[str, int]
    canary_switches: list[str]
    canary_nics: list[str]
    check: CandidateCheck  # its paired confirmation against the baseline
    winner_metrics: dict[str, float]
    baseline_metrics: dict[str, float]
    parent_run_id: str | None

    @property
    def canary(self) -> list[str]:
        return [*self.canary_switches, *self.canary_nics]


def open_study(target: str | None, storage: str | None = None,
               results: str | None = None) -> tuple[Any, str]:
    """(Optuna study, storage URL) from a study name or results folder (default the newest)."""
    from tuner import optuna_io
    from tuner.cli.resume import locate

    url, name = locate(target, storage, results)
    names = optuna_io.study_names(url)
    if not names:
        raise ConfigError(f"no studies in {url}")
    if name is not None and name not in names:
        raise ConfigError(f"study {name!r} not in {url} (has {', '.join(names)})")
    return optuna_io.load_study(name or names[-1], url), url


def why_no_winner(st: Any) -> str:
    from tuner import study as studies

    conf = studies.confirmation(st)
    if conf is None:
        return "no confirmation ran (interrupted study, or budget.confirm_repeats 0)"
    b = conf.best
    if b is None:
        return "no candidate to confirm: nothing completed within the limits"
    from objectives.verdict import winner_line

    return (f"best candidate trial {b.trial}: {winner_line(b) or 'no effect measured'}; not "
            f"confirmed: {b.problem or 'its interval includes 0'}")


def load_winner(target: str | None, storage: str | None = None,
                results: str | None = None) -> StudyWinner:
    """The confirmed winner of a study; ``NoWinner`` (exit 3) names why there is none."""
    from tuner import study as studies
    from tuner.experiment import parse_experiment

    st, url = open_study(target, storage, results)
    text = study_store.info(st).experiment_yaml
    if not text:
        raise ConfigError(f"study {st.study_name!r} was not created by ecntune run")
    exp = parse_experiment(str(text), f"<experiment stored with study {st.study_name}>",
                           i_know=True)
    win: TrialOutcome | None = studies.winner(st)
    conf = studies.confirmation(st)
    if win is None or conf is None:
        raise NoWinner(f"study {st.study_name} has no confirmed winner ({why_no_winner(st)})")
    check = next((c for c in conf.candidates if c.trial == win.number), None)
    if check is None or not check.confirmed or win.is_baseline or win.state != "COMPLETE" \
            or not win.feasible:  # an inconsistent store: never act on a trial that did not win
        raise NoWinner(f"study {st.study_name}: its stored winner, trial {win.number} "
                       f"({win.verdict}), is not a confirmed, completed, feasible candidate; "
                       "refusing it")
    base = studies.baseline(st)
    canary = study_store.info(st).canary
    return StudyWinner(
        study=st.study_name, storage=url, experiment=exp, trial=win.number,
        values=dict(win.values), baseline=dict(base.values) if base else {},
        canary_switches=list(canary.get("switches", [])),
        canary_nics=list(canary.get("nics", [])),
        check=check,
        winner_metrics=dict(win.metrics), baseline_metrics=dict(base.metrics) if base else {},
        parent_run_id=study_store.info(st).mlflow_parent_run_id)
