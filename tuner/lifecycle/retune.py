"""Re-tuning after a traffic-mix change, linked to the study that tuned the old mix.

The new study measures, right after trial 0 (the canary as deployed now), the old study's
choice (``warm:old-winner``: its confirmed winner, or the baseline it said to keep when nothing
beat it) and its other confirmed candidates (``warm:old-<n>``); a point equal to the deployed
settings is trial 0 itself:
every point is re-measured under the new mix, no old score is reused. At the end the loop's
paired confirmation measures the baseline, the top candidates and the old winner interleaved on
the same fresh replicates, so

* how the old winner fares on the new mix is its paired improvement over the deployed settings,
  with the bootstrap interval (``tuner.study.CandidateCheck``);
* how much the re-tune recovered is the new winner against the old winner *on the same
  replicates*: per replicate ``d_new - d_old`` (both are paired score differences against the
  same baseline measurement, so the baseline cancels), its mean and bootstrap interval.

When the old choice equals the deployed settings it is trial 0, the reference of every paired
number, and what the re-tune recovered is its winner's own confirmed improvement.

The link: study attribute ``lineage`` and MLflow tags ``ecntune.retuned_from`` (old study),
``ecntune.retuned_from_trial``, ``ecntune.retuned_from_choice`` (``winner`` or ``baseline``:
what the old study chose), ``ecntune.retuned_from_evidence`` (its paired number for that
choice), ``ecntune.retuned_from_run`` (old parent run id) and ``ecntune.retuned_from_tracking``
(the store it is in; the new study logs there too unless its experiment names a store). The
summary goes to the CLI, the parent run's ``retune_*`` metrics and the ``retune`` block of its
summary.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner import study_store
from tuner.errors import NoWinner

if TYPE_CHECKING:
    from tuner.study import CandidateCheck

OLD_WINNER = "old-winner"


def old_choice(old: Any) -> tuple[int, dict[str, int]]:
    """What the old study recommended: its confirmed winner, or (nothing beat its baseline)
    the baseline it said to keep -- (trial, knob values)."""
    from tuner import study as studies

    win = studies.winner(old) or studies.baseline(old)
    if win is None:
        raise NoWinner(f"study {old.study_name} has neither a confirmed winner nor a measured "
                       "baseline to start from; run the new mix as a fresh study")
    return win.number, dict(win.values)


def warm_points(old: Any, top: int = 3) -> list[tuple[str, dict[str, int]]]:
    """The old study's choice (``old_choice``), then its other confirmed candidates."""
    from tuner import study as studies

    trial, chosen = old_choice(old)
    conf = studies.confirmation(old)
    if conf is None:
        return [(OLD_WINNER, chosen)]
    values = {o.number: o.values for o in studies.outcomes(old)}
    others = sorted((c for c in conf.candidates if c.confirmed and c.trial != trial),
                    key=lambda c: -c.improvement_percent)
    return [(OLD_WINNER, chosen),
            *((f"old-{c.trial}", dict(values[c.trial])) for c in others[:max(0, top - 1)])]


def choice_evidence(old: Any) -> tuple[str, str]:
    """What the old choice is (``"winner"`` or ``"baseline"``) and the old study's paired
    evidence for it, as one line: why a re-tune starts where it starts."""
    from tuner import study as studies

    conf = studies.confirmation(old)
    win = studies.winner(old)
    if win is not None and conf is not None and conf.best is not None:
        b = conf.best
        return "winner", (f"its confirmed winner, trial {win.number}: {_pct(b)} on its own mix")
    if conf is None or conf.best is None:
        return "baseline", "its baseline (no candidate was confirmed against it)"
    b = conf.best
    return "baseline", (f"its baseline: nothing beat it on its own mix (best candidate, trial "
                        f"{b.trial}: {_pct(b)}" + (f", {b.problem}" if b.problem else "") + ")")


def old_tracking_uri(old: Any, url: str) -> str:
    """The MLflow store the old study logged to ("" when it did not log): the URI it recorded,
    else (studies from before that attribute) its experiment's ``tracking.uri``, else the
    default next to its Optuna database."""
    info = study_store.info(old)
    if not info.mlflow_parent_run_id:
        return ""
    if info.mlflow_tracking_uri:
        return info.mlflow_tracking_uri
    import yaml

    try:
        stored = yaml.safe_load(info.experiment_yaml or "") or {}
        uri = (stored.get("tracking") or {}).get("uri")
    except (yaml.YAMLError, AttributeError):
        uri = None
    if uri:
        return str(uri)
    prefix = "sqlite:///"
    if url.startswith(prefix) and url.endswith("/optuna.db"):
        db = Path(url[len(prefix):]).with_name("mlflow.db")
        return f"{prefix}{db}" if db.exists() else ""
    return ""


def lineage(old: Any, url: str) -> dict[str, str]:
    choice, evidence = choice_evidence(old)
    return {"retuned_from": old.study_name, "retuned_from_storage": url,
            "retuned_from_trial": str(old_choice(old)[0]),
            "retuned_from_choice": choice, "retuned_from_evidence": evidence,
            "retuned_from_run": study_store.info(old).mlflow_parent_run_id or "",
            "retuned_from_tracking": old_tracking_uri(old, url)}


def same_store(exp: Any, store: str) -> Any:
    """The experiment logging to MLflow ``store`` unless it names its own ``tracking.uri``: a
    re-tune logs where the old study did (so the two parent runs link in one MLflow UI), and a
    resumed study where it started."""
    t = exp.tracking
    if not store or not t.enabled or t.uri is not None:
        return exp
    return exp.model_copy(update={"tracking": t.model_copy(update={"uri": store})})


def resumed(st: Any) -> dict[str, Any]:
    """``StudyRunner`` options that ``ecntune resume`` passes for a re-tune study (none for any
    other): its old-study points (still confirmed alongside, never screened) and its summary."""
    lineage = study_store.info(st).lineage
    if not lineage:
        return {}
    from tuner import optuna_io

    tags = [study_store.tags(t) for t in optuna_io.trials(st)]
    warm = [(tg.role.removeprefix("warm:"), tg.values)
            for tg in tags if tg.role.startswith("warm:old-")]  # incl. warm:old-winner
    return {"warm": warm, "lineage": dict(lineage),
            "summarize": summary_for_tracking}


def _pct(c: CandidateCheck) -> str:
    name = "busbw" if c.primary == "busbw" else "p99 (lower is better)"
    return (f"{name} {c.improvement_percent:+.1f} % (95 % interval {c.ci95_low:+.1f} % to "
            f"{c.ci95_high:+.1f} %, {len(c.diffs)} paired repeats)")


@dataclass(frozen=True)
class RetuneSummary:
    old_study: str
    new_study: str
    old_trial: int | None  # the old choice's trial in the new study (None: it is trial 0)
    old_check: CandidateCheck | None  # old choice vs the deployed settings, new mix
    old_note: str  # why there is no check, or ""
    new_trial: int | None
    new_check: CandidateCheck | None
    recovered_percent: float | None  # new winner vs old choice, same replicates
    recovered_ci: tuple[float, float] | None
    pairs: int
    old_metrics: dict[str, float]  # the old choice measured under the new mix
    new_metrics: dict[str, float]  # the re-tune winner (or the best candidate) likewise
    best_unconfirmed: CandidateCheck | None = None  # when nothing was confirmed
    old_choice: str = ""  # what the old study chose: "winner" | "baseline" ("" not recorded)
    old_evidence: str = ""  # the old study's paired evidence for that choice
    old_run: str = ""  # the old study's MLflow parent run
    recovered_note: str = ""  # why there is no recovered number, or ""

    def metrics(self) -> dict[str, float]:
        """The MLflow parent-run metrics of the re-tune (``retune_*``)."""
        out: dict[str, float] = {"retune_old_is_baseline": float(self.old_trial is None)}
        out.update({f"retune_old_{k}": v for k, v in self.old_metrics.items() if k in _SHOWN})
        if self.old_check is not None:
            out.update({"retune_old_winner_percent": self.old_check.improvement_percent,
                        "retune_old_winner_ci95_low": self.old_check.ci95_low,
                        "retune_old_winner_ci95_high": self.old_check.ci95_high})
        if self.new_check is not None:
            out.update({f"retune_new_{k}": v for k, v in self.new_metrics.items()
                        if k in _SHOWN})
        if self.recovered_percent is not None and self.recovered_ci is not None:
            out.update({"retune_recovered_percent": self.recovered_percent,
                        "retune_recovered_ci95_low": self.recovered_ci[0],
                        "retune_recovered_ci95_high": self.recovered_ci[1],
                        "retune_recovered_pairs": float(self.pairs)})
        return out

    def as_dict(self) -> dict[str, Any]:
        """The ``retune`` block of the parent run's summary.json."""
        def check(c: CandidateCheck | None) -> dict[str, Any] | None:
            return None if c is None else {
                "trial": c.trial, "improvement_percent": c.improvement_percent,
                "ci95_low": c.ci95_low, "ci95_high": c.ci95_high,
                "paired_repeats": len(c.diffs), "problem": c.problem, "confirmed": c.confirmed}

        rec = None
        if self.recovered_percent is not None and self.recovered_ci is not None:
            rec = {"percent": self.recovered_percent, "ci95_low": self.recovered_ci[0],
                   "ci95_high": self.recovered_ci[1], "pairs": self.pairs}
        return {
            "from_study": self.old_study, "from_run": self.old_run,
            "old_choice": self.old_choice, "old_evidence": self.old_evidence,
            "old_on_new_mix": {"trial": self.old_trial if self.old_trial is not None else 0,
                               "is_baseline": self.old_trial is None,
                               "metrics": self.old_metrics, "paired": check(self.old_check),
                               "note": self.old_note},
            "new_winner": None if self.new_check is None else {
                "trial": self.new_trial, "metrics": self.new_metrics,
                "paired": check(self.new_check)},
            "best_unconfirmed": check(self.best_unconfirmed),
            "recovered": rec, "recovered_note": self.recovered_note}

    def lines(self) -> list[str]:
        out = [f"re-tune of study {self.old_study} as {self.new_study} (paired, confirmed):"]
        if self.old_evidence:
            out.append(f"  old choice: {self.old_evidence}")
        if self.old_trial is None:
            out.append("  old choice on the new mix: it is what runs now (trial 0, the "
                       f"baseline every paired number below is relative to): "
                       f"{_measured(self.old_metrics)}")
        elif self.old_check is not None:
            out.append(f"  old choice on the new mix (trial {self.old_trial}): "
                       f"{_measured(self.old_metrics)}; vs the deployed settings "
                       f"{_pct(self.old_check)}"
                       + (f", {self.old_note}" if self.old_note else ""))
        else:
            out.append(f"  old choice on the new mix (trial {self.old_trial}): "
                       f"{_measured(self.old_metrics)}; {self.old_note}")
        if self.new_check is None:
            out.append("  re-tune: no confirmed winner on the new mix (nothing beat the "
                       "deployed settings on paired repeats)")
            if self.best_unconfirmed is not None:
                b = self.best_unconfirmed
                out.append(f"  best candidate, unconfirmed (trial {b.trial}): {_pct(b)}"
                           + (f", {b.problem}" if b.problem else ""))
        else:
            out.append(f"  re-tune winner (trial {self.new_trial}): "
                       f"{_measured(self.new_metrics)}; vs the deployed settings "
                       f"{_pct(self.new_check)}")
        if self.recovered_percent is not None and self.recovered_ci is not None:
            lo, hi = self.recovered_ci
            out.append(f"  recovered by the re-tune (new winner vs old choice, same "
                       f"replicates): {self.recovered_percent:+.1f} % (95 % interval "
                       f"{lo:+.1f} % to {hi:+.1f} %, {self.pairs} pairs)")
        elif self.recovered_note:
            out.append(f"  recovered by the re-tune: not measured ({self.recovered_note})")
        return out


_SHOWN = ("busbw_norm", "p99_us", "pause_us_per_s")


def _measured(m: dict[str, float]) -> str:
    parts = []
    if "busbw_norm" in m:
        parts.append(f"busbw/line {m['busbw_norm']:.3f}")
    if "p99_us" in m:
        parts.append(f"probe p99 {m['p99_us']:.3g} us")
    if "pause_us_per_s" in m:
        parts.append(f"PFC pause {m['pause_us_per_s']:.3g} us/s")
    return ", ".join(parts) or "no metrics recorded"


def _recovered(old: Any, old_check: CandidateCheck | None, new_check: CandidateCheck | None
               ) -> tuple[float | None, tuple[float, float] | None, int, str]:
    """(percent, interval, pairs, why not): the new winner against the old choice."""
    import numpy as np

    from objectives.score import log2_percent, t_interval

    if new_check is None:
        return None, None, 0, "no confirmed winner on the new mix"
    if old is None:  # the old choice is the baseline: recovered is the winner's own check
        return (new_check.improvement_percent, (new_check.ci95_low, new_check.ci95_high),
                len(new_check.diffs), "")
    if new_check.trial == old.number:
        return None, None, 0, "the old choice is the re-tune's winner: nothing to recover"
    if old_check is None or not old_check.diffs:
        return None, None, 0, "the old choice has no paired repeats on the new mix"
    n = min(len(new_check.diffs), len(old_check.diffs))
    d = [a - b for a, b in zip(new_check.diffs[:n], old_check.diffs[:n], strict=True)]
    lo, hi = t_interval(d)
    return (log2_percent(float(np.mean(d))), (log2_percent(lo), log2_percent(hi)), n, "")


def summarize(new: Any) -> RetuneSummary:
    """The summary of a finished re-tune study (see the module docstring)."""
    from tuner import study as studies

    ln = dict(study_store.info(new).lineage)
    conf = studies.confirmation(new)
    checks = {c.trial: c for c in conf.candidates} if conf is not None else {}
    old = next((o for o in studies.outcomes(new) if o.role == f"warm:{OLD_WINNER}"), None)
    old_check = checks.get(old.number) if old is not None else None
    note = ""
    if old is not None and old_check is None:
        note = (f"not viable ({old.verdict})" if not old.candidate
                else "not re-measured by the confirmation")
    elif old_check is not None and old_check.problem:
        note = old_check.problem
    win = studies.winner(new)
    new_check = checks.get(win.number) if win is not None else None
    rec, rec_ci, pairs, why = _recovered(old, old_check, new_check)
    if conf is None:
        why = "no confirmation ran (interrupted study, or budget.confirm_repeats 0)"
    base = studies.baseline(new)
    shown = win or (next((o for o in studies.outcomes(new) if o.number == conf.best.trial),
                         None) if conf is not None and conf.best is not None else None)
    return RetuneSummary(
        old_study=str(ln.get("retuned_from", "?")), new_study=new.study_name,
        old_trial=old.number if old is not None else None, old_check=old_check, old_note=note,
        new_trial=win.number if win is not None else None, new_check=new_check,
        recovered_percent=rec, recovered_ci=rec_ci, pairs=pairs,
        old_metrics=dict(ref.metrics) if (ref := old or base) is not None else {},
        new_metrics=dict(shown.metrics) if shown is not None else {},
        best_unconfirmed=conf.best if conf is not None and win is None else None,
        old_choice=str(ln.get("retuned_from_choice", "")),
        old_evidence=str(ln.get("retuned_from_evidence", "")),
        old_run=str(ln.get("retuned_from_run", "")), recovered_note=why)


def summary_for_tracking(new: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """(parent-run metrics, summary.json block) of a re-tune study (``StudyRunner``'s
    ``summarize`` hook: logged with the study's own summary, in the same batch)."""
    s = summarize(new)
    return s.metrics(), s.as_dict()
