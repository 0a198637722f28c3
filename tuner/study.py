"""The study as the review code reads it: trial outcomes, the one winner policy, confirmation.

The loop writes Optuna trials and their attributes (``tuner.study_store``); ``run``'s summary,
``show``, ``export``, ``report`` and ``--keep-best`` read the outcomes back through this module
only, so they cannot disagree about which trial won.

The winner policy: a trial is a *candidate* when it completed, is not the baseline, and met
every guardrail on every placement (``objectives.score``) and every safety limit. At the end
of a study the top candidates are re-measured against the baseline on fresh placements, drawn
for the study and interleaved (``confirmation``), and judged from those measurements alone by
``objectives.verdict.judge``: per-metric effects with corrected 95 % intervals, guardrails per
placement, and the price when the baseline breaks a guardrail. The *winner* is the confirmed
candidate with the best primary effect. Without one there is no winner: keep the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from objectives.verdict import CandidateCheck
from tuner import optuna_io, study_store


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
    """A finished Optuna trial as a ``TrialOutcome`` (from its tags)."""
    tags = study_store.tags(t)
    vals = tuple(t.values) if t.values is not None else None
    return TrialOutcome(number=t.number, state=t.state.name, verdict=tags.verdict,
                        values=tags.values, score=tags.score, objective=vals,
                        metrics=tags.metrics, is_baseline=tags.role == "baseline",
                        role=tags.role, constraints=dict(optuna_io.constraints(t)))


def outcomes(study: Any) -> list[TrialOutcome]:
    """Every finished trial, in order."""
    return [outcome_of(t) for t in optuna_io.trials(study)
            if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]


def baseline(study: Any) -> TrialOutcome | None:
    return next((o for o in outcomes(study) if o.is_baseline and o.state == "COMPLETE"), None)


def pareto(study: Any) -> list[TrialOutcome]:
    """The non-dominated candidates (multi-objective mode); the best candidate (scalar)."""
    return _front([o for o in outcomes(study) if o.candidate], optuna_io.directions(study))


def _front(cands: list[TrialOutcome], dirs: list[str]) -> list[TrialOutcome]:
    from objectives.score import pareto_front

    cands = [o for o in cands if o.objective is not None]
    if not cands:
        return []
    if len(dirs) == 1:
        return [max(cands, key=_rank)]
    keep = set(pareto_front([(o.number, o.objective or ()) for o in cands], dirs))
    return [o for o in cands if o.number in keep]


def _rank(o: TrialOutcome) -> tuple[float, int]:
    return (o.score if o.score is not None else float("-inf"), -o.number)


def candidates(study: Any, k: int) -> list[TrialOutcome]:
    """The ``k`` best candidates by scalar score (in multi mode, from the Pareto front first),
    one per setting: a trial whose knob values equal a better one's adds nothing to confirm."""
    return _top([o for o in outcomes(study) if o.candidate], optuna_io.directions(study), k)


def would_be_candidate(study: Any, k: int, trial: TrialOutcome) -> bool:
    """Whether ``trial``, not yet told to the study, would be among ``candidates(study, k)``:
    the same ranking, so the loop's early look at a trial cannot disagree with the end's."""
    if not trial.candidate:
        return False
    cands = [o for o in outcomes(study) if o.candidate] + [trial]
    top = _top(cands, optuna_io.directions(study), k)
    return any(o.number == trial.number for o in top)


def _top(cands: list[TrialOutcome], dirs: list[str], k: int) -> list[TrialOutcome]:
    front = {o.number for o in _front(cands, dirs)}
    cands = sorted(cands, key=lambda o: (o.number in front, *_rank(o)), reverse=True)
    out: list[TrialOutcome] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for o in cands:
        key = tuple(sorted(o.values.items()))
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out[:k]


def best_unconfirmed(study: Any) -> TrialOutcome | None:
    """The best candidate by its own (study) score: what confirmation will test first."""
    top = candidates(study, 1)
    return top[0] if top else None


@dataclass(frozen=True)
class Confirmation:
    candidates: list[CandidateCheck]
    paired_repeats: int
    winner: int | None
    seeds: list[int] = field(default_factory=list)  # the placements, drawn for this study
    # "vary": every repeat ran on its own placement; "fixed": the backend could not vary it,
    # so the intervals are over repeats of one placement, not over placements.
    placements: str = "vary"
    folder: str = ""  # where the confirmation measurements were saved

    @property
    def best(self) -> CandidateCheck | None:
        """The winner's check, or the best unconfirmed one (to show why nothing won)."""
        if not self.candidates:
            return None
        if self.winner is not None:
            return next(c for c in self.candidates if c.trial == self.winner)
        return max(self.candidates, key=lambda c: c.improvement_percent)

    def stored(self, folder: str) -> dict[str, Any]:
        """What the study keeps (``confirmation`` user attr)."""
        return {"candidates": [c.__dict__ for c in self.candidates],
                "paired_repeats": self.paired_repeats, "winner": self.winner,
                "seeds": self.seeds, "placements": self.placements, "folder": folder}

    def summary(self) -> dict[str, Any]:
        """The ``confirmation`` block of summary.json: the winner's (or best candidate's)
        per-metric effects in their own units, and every candidate's check."""
        b = self.best
        return {"candidates": [c.trial for c in self.candidates],
                "paired_repeats": self.paired_repeats, "winner": self.winner,
                "seeds": self.seeds, "placements": self.placements,
                "primary": b.primary if b else None,
                "change_percent": b.improvement_percent if b else None,
                "ci95_low": b.ci95_low if b else None, "ci95_high": b.ci95_high if b else None,
                "effects": b.effects if b else {}, "price": b.price if b else "",
                "confirmed": self.winner is not None, "measurements": self.folder,
                "per_candidate": [c.__dict__ for c in self.candidates]}


def confirmation(study: Any) -> Confirmation | None:
    """The end-of-study confirmation (``None`` before it ran: an interrupted study)."""
    raw = study_store.info(study).confirmation
    if not raw or "candidates" not in raw:
        return None
    checks = [CandidateCheck(**c) for c in raw["candidates"]]
    return Confirmation(candidates=checks, paired_repeats=int(raw["paired_repeats"]),
                        winner=raw.get("winner"), seeds=list(raw.get("seeds", [])),
                        placements=str(raw.get("placements", "vary")),
                        folder=str(raw.get("folder", "")))


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
    def rolled_back(self) -> tuple[int, int]:
        """(rolled back, proposed) among the sampler's proposals after its start-up trials."""
        after = [t for t in self.trials if t.role == "proposal"][self.startup_trials:]
        return sum(t.verdict.startswith("rolled_back") for t in after), len(after)

    @property
    def rolled_back_share(self) -> float | None:
        """Rolled-back share of the sampler's proposals after its start-up trials."""
        k, n = self.rolled_back
        return k / n if n else None


def load_for_resume(storage: str, study: str | None) -> tuple[str, str]:
    """(study name, stored experiment YAML) of a study to resume (default: the newest)."""
    from tuner.errors import ConfigError

    names = optuna_io.study_names(storage)
    if not names:
        raise ConfigError(f"no studies in {storage}")
    name = study or names[-1]
    st = optuna_io.load_study(name, storage)
    text = study_store.info(st).experiment_yaml
    if not text:
        raise ConfigError(f"study {name!r} in {storage} was not created by ecntune run "
                          "(no experiment_yaml); pass --experiment FILE")
    return name, str(text)


def interval_note(conf: Confirmation) -> str:
    """How the confirmation's intervals were made, and over what."""
    k = len(conf.candidates)
    over = (f"{conf.paired_repeats} placements drawn for this study, baseline and candidates "
            "interleaved on each" if conf.placements != "fixed" else
            f"{conf.paired_repeats} repeats of ONE placement (this backend cannot vary the "
            "placement: the interval is over repeats, not placements)")
    corr = f", Bonferroni-corrected for {k} candidates" if k > 1 else ""
    return f"paired on {over}; 95 % t-intervals{corr}"


def verdict_lines(conf: Confirmation | None, *, markup: bool = False) -> list[str]:
    """The confirmation in the operator's units: every view (CLI, show, report) prints these."""
    from objectives.verdict import winner_line

    def mark(text: str, colour: str) -> str:
        return f"[{colour}]{text}[/]" if markup else text

    if conf is None:
        return [mark("not confirmed", "yellow") + ": the study stopped before its "
                "confirmation; no winner (resume it to finish)"]
    rows = []
    for c in conf.candidates:
        verdict = mark("confirmed", "green") if c.confirmed else (
            mark("not confirmed", "yellow") + f" ({c.problem or 'interval includes 0'})")
        rows.append(f"  trial {c.trial}: {winner_line(c) or 'no effect measured'}: {verdict}")
    best = conf.best
    if conf.winner is not None and best is not None:
        head = [f"winner: trial {conf.winner}: {winner_line(best)}"]
        if best.price:
            head.append(f"  trade: {best.price}")
    elif best is not None:
        head = [f"nothing beat the baseline (best candidate, trial {best.trial}: "
                f"{best.problem or 'interval includes 0'}): keep the current settings"]
    else:
        head = ["nothing beat the baseline (no candidate met every guardrail): keep the "
                "current settings"]
    if not conf.candidates:  # nothing was re-measured: no interval to describe
        return head
    return [*head, f"  ({interval_note(conf)})", *rows]
