"""What the lifecycle commands need from a finished study, read in one place: the winner's knob
values, the baseline's, the canary, the experiment stored with the study and whether fresh
repeats confirmed the winner. Read-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.experiment import Experiment


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
    confirmed: bool
    why_not: str  # empty when confirmed
    confirmation: dict[str, Any] | None

    @property
    def canary(self) -> list[str]:
        return [*self.canary_switches, *self.canary_nics]


def load_winner(target: str | None, storage: str | None = None,
                results: str | None = None) -> StudyWinner:
    """The recommended trial of a study (name or results folder; default the newest)."""
    from tuner import optuna_io
    from tuner.cli.resume import locate
    from tuner.experiment import parse_experiment
    from tuner.loop import confirmation, outcome_of, recommended

    url, name = locate(target, storage, results)
    names = optuna_io.study_names(url)
    if not names:
        raise ConfigError(f"no studies in {url}")
    if name is not None and name not in names:
        raise ConfigError(f"study {name!r} not in {url} (has {', '.join(names)})")
    st = optuna_io.load_study(name or names[-1], url)
    text = st.user_attrs.get("experiment_yaml")
    if not text:
        raise ConfigError(f"study {st.study_name!r} was not created by ecntune run")
    exp = parse_experiment(str(text), f"<experiment stored with study {st.study_name}>")
    best, _ = recommended(st)
    if best is None:
        raise ConfigError(f"study {st.study_name} has no completed trial")
    base = next((o for o in map(outcome_of, optuna_io.trials(st))
                 if o.is_baseline and o.state == "COMPLETE"), None)
    conf = confirmation(st)
    why = ""
    if best.is_baseline:
        why = "the baseline is the best trial: nothing to promote"
    elif conf is None or conf.get("trial") != best.number:
        why = f"trial {best.number} was never re-measured (budget.confirm_repeats)"
    elif conf.get("problem"):
        why = f"its confirmation repeats failed: {conf['problem']}"
    elif conf.get("best_score", float("-inf")) <= conf["baseline_score"]:
        why = "its confirmation repeats did not beat the baseline"
    canary = st.user_attrs.get("canary", {})
    return StudyWinner(
        study=st.study_name, storage=url, experiment=exp, trial=best.number,
        values=dict(best.values), baseline=dict(base.values) if base else {},
        canary_switches=list(canary.get("switches", [])),
        canary_nics=list(canary.get("nics", [])), confirmed=not why, why_not=why,
        confirmation=conf)
