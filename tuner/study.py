"""The study as the review code reads it: trial outcomes, the one winner policy, confirmation.

The loop writes Optuna trials and study attributes; ``run``'s summary, ``show``, ``export``,
``report`` and ``--keep-best`` read them back through this module only, so they cannot disagree
about which trial won.

The winner policy: a trial is a *candidate* when it completed, is not the baseline, and met
every constraint (busbw floor, tenants, safety; in multi-objective mode also the PFC budget).
At the end of a study the top candidates are re-measured against the baseline on fresh paired
replicates, interleaved (``confirmation``). A candidate is *confirmed* when the bootstrap 95 %
interval of its paired improvement lies above 0 and every repeat stayed within every limit;
the *winner* is the confirmed candidate with the highest mean paired improvement. Without a
confirmed candidate there is no winner: nothing beat the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner import optuna_io


@dataclass
class TrialOutcome:
    number: int
    state: str
    verdict: str
    values: dict[str, int]
    score: float | None = None
    objective: tuple[float, ...] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    is_baseline: bool = False
    role: str = "proposal"  # "baseline", "warm:<label>", "proposal"
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def candidate(self) -> bool:
        return self.state == "COMPLETE" and not self.is_baseline and self.feasible


def outcome_of(t: Any) -> TrialOutcome:
    """A finished Optuna trial as a ``TrialOutcome`` (from its user attrs)."""
    ua = t.user_attrs
    vals = tuple(t.values) if t.values is not None else None
    role = str(ua.get("role", "proposal"))
    return TrialOutcome(number=t.number, state=t.state.name, verdict=ua.get("verdict", "?"),
                        values=dict(ua.get("values", {})), score=ua.get("score"),
                        objective=vals, metrics=dict(ua.get("metrics", {})),
                        is_baseline=role == "baseline", role=role,
                        constraints=dict(optuna_io.constraints(t)))


def outcomes(study: Any) -> list[TrialOutcome]:
    """Every finished trial, in order."""
    return [outcome_of(t) for t in optuna_io.trials(study)
            if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]


def baseline(study: Any) -> TrialOutcome | None:
    return next((o for o in outcomes(study) if o.is_baseline and o.state == "COMPLETE"), None)


def pareto(study: Any) -> list[TrialOutcome]:
    """The non-dominated candidates (multi-objective mode); the best candidate (scalar)."""
    from objectives.score import pareto_front

    cands = [o for o in outcomes(study) if o.candidate and o.objective is not None]
    if not cands:
        return []
    dirs = optuna_io.directions(study)
    if len(dirs) == 1:
        return [max(cands, key=_rank)]
    keep = set(pareto_front([(o.number, o.objective or ()) for o in cands], dirs))
    return [o for o in cands if o.number in keep]


def _rank(o: TrialOutcome) -> tuple[float, int]:
    return (o.score if o.score is not None else float("-inf"), -o.number)


def candidates(study: Any, k: int) -> list[TrialOutcome]:
    """The ``k`` best candidates by scalar score (in multi mode, from the Pareto front first)."""
    cands = [o for o in outcomes(study) if o.candidate]
    front = {o.number for o in pareto(study)}
    cands.sort(key=lambda o: (o.number in front, *_rank(o)), reverse=True)
    return cands[:k]


def best_unconfirmed(study: Any) -> TrialOutcome | None:
    """The best candidate by its own (study) score: what confirmation will test first."""
    top = candidates(study, 1)
    return top[0] if top else None


@dataclass(frozen=True)
class CandidateCheck:
    """One candidate's paired confirmation against the baseline."""

    trial: int
    diffs: list[float]  # paired score differences, one per repeat (log2 units)
    improvement_percent: float  # equivalent_percent of the mean difference
    ci95_low: float  # in %, from the bootstrap interval of the mean difference
    ci95_high: float
    problem: str  # the first limit a repeat crossed ("" = none)
    confirmed: bool


@dataclass(frozen=True)
class Confirmation:
    candidates: list[CandidateCheck]
    paired_repeats: int
    winner: int | None

    @property
    def best(self) -> CandidateCheck | None:
        """The winner's check, or the best unconfirmed one (to show why nothing won)."""
        if not self.candidates:
            return None
        if self.winner is not None:
            return next(c for c in self.candidates if c.trial == self.winner)
        return max(self.candidates, key=lambda c: c.improvement_percent)

    def summary(self) -> dict[str, Any]:
        """The ``confirmation`` block of summary.json."""
        b = self.best
        return {"candidates": [c.trial for c in self.candidates],
                "paired_repeats": self.paired_repeats, "winner": self.winner,
                "improvement_percent": b.improvement_percent if b else None,
                "ci95_low": b.ci95_low if b else None, "ci95_high": b.ci95_high if b else None,
                "confirmed": self.winner is not None,
                "per_candidate": [c.__dict__ for c in self.candidates]}


def confirmation(study: Any) -> Confirmation | None:
    """The end-of-study confirmation (``None`` before it ran: an interrupted study)."""
    raw = study.user_attrs.get("confirmation")
    if not raw or "candidates" not in raw:
        return None
    checks = [CandidateCheck(**c) for c in raw["candidates"]]
    return Confirmation(candidates=checks, paired_repeats=int(raw["paired_repeats"]),
                        winner=raw.get("winner"))


def winner(study: Any) -> TrialOutcome | None:
    """The confirmed winner (see the module docstring), or None."""
    conf = confirmation(study)
    if conf is None or conf.winner is None:
        return None
    return next((o for o in outcomes(study) if o.number == conf.winner), None)


@dataclass
class StudyResult:
    study: str
    storage: str
    tracking_uri: str
    parent_run_id: str | None
    mode: str
    baseline: TrialOutcome | None
    best: TrialOutcome | None  # the best candidate by study score (unconfirmed)
    winner: TrialOutcome | None  # the confirmed winner
    pareto: list[TrialOutcome]
    trials: list[TrialOutcome]
    final: str  # "baseline" or "kept:<trial>"
    final_settings: Any
    confirmation: Confirmation | None = None
    interrupted: str | None = None
    tracking_failures: list[str] = field(default_factory=list)
    mlflow_experiment_id: str | None = None
    repeats: int = 1
    noise: dict[str, float] = field(default_factory=dict)
    pruned_saved_s: float = 0.0
    startup_trials: int = 0

    @property
    def rolled_back_share(self) -> float | None:
        """Rolled-back share of the sampler's proposals after its start-up trials."""
        return rolled_back_share(self.trials, self.startup_trials)


def rolled_back_share(trials: list[TrialOutcome], startup: int) -> float | None:
    """Share of proposals rolled back, after the first ``startup`` (random) proposals."""
    after = [t for t in trials if t.role == "proposal"][startup:]
    if not after:
        return None
    return sum(t.verdict.startswith("rolled_back") for t in after) / len(after)


def read(study: Any) -> dict[str, Any]:
    """The study attributes the review needs besides the trials (repeats, noise, drift)."""
    ua = study.user_attrs
    return {"repeats": int(ua.get("repeats", 1)), "noise": dict(ua.get("noise", {})),
            "drift": list(ua.get("drift", [])), "startup_trials": int(ua.get("startup_trials",
                                                                              0))}


def load_for_resume(storage: str, study: str | None) -> tuple[str, str]:
    """(study name, stored experiment YAML) of a study to resume (default: the newest)."""
    from tuner.errors import ConfigError

    names = optuna_io.study_names(storage)
    if not names:
        raise ConfigError(f"no studies in {storage}")
    name = study or names[-1]
    st = optuna_io.load_study(name, storage)
    text = st.user_attrs.get("experiment_yaml")
    if not text:
        raise ConfigError(f"study {name!r} in {storage} was not created by ecntune run "
                          "(no experiment_yaml); pass --experiment FILE")
    return name, str(text)
