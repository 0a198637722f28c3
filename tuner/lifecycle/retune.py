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

The link: study attribute ``lineage`` and MLflow tags ``ecntune.retuned_from`` (old study),
``ecntune.retuned_from_trial``, ``ecntune.retuned_from_run`` (old parent run id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def lineage(old: Any, url: str) -> dict[str, str]:
    return {"retuned_from": old.study_name, "retuned_from_storage": url,
            "retuned_from_trial": str(old_choice(old)[0]),
            "retuned_from_run": str(old.user_attrs.get("mlflow_parent_run_id") or "")}


@dataclass(frozen=True)
class RetuneSummary:
    old_study: str
    new_study: str
    old_trial: int | None  # the old winner's trial in the new study (None: it is trial 0)
    old_check: CandidateCheck | None  # old winner vs the deployed settings, new mix
    old_note: str  # why there is no check, or ""
    new_trial: int | None
    new_check: CandidateCheck | None
    recovered_percent: float | None  # new winner vs old winner, same replicates
    recovered_ci: tuple[float, float] | None
    pairs: int
    old_metrics: dict[str, float]  # the old choice measured under the new mix
    new_metrics: dict[str, float]  # the re-tune winner (or the best candidate) likewise
    best_unconfirmed: CandidateCheck | None = None  # when nothing was confirmed

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.old_check is not None:
            out.update({"retune_old_winner_percent": self.old_check.improvement_percent,
                        "retune_old_winner_ci95_low": self.old_check.ci95_low,
                        "retune_old_winner_ci95_high": self.old_check.ci95_high})
        if self.recovered_percent is not None and self.recovered_ci is not None:
            out.update({"retune_recovered_percent": self.recovered_percent,
                        "retune_recovered_ci95_low": self.recovered_ci[0],
                        "retune_recovered_ci95_high": self.recovered_ci[1]})
        return out

    def lines(self) -> list[str]:
        def pct(c: CandidateCheck) -> str:
            return (f"{c.improvement_percent:+.1f} % (95 % interval {c.ci95_low:+.1f} % to "
                    f"{c.ci95_high:+.1f} %, {len(c.diffs)} paired repeats)")

        out = [f"re-tune of study {self.old_study} as {self.new_study} (paired, confirmed):"]
        if self.old_trial is None:
            out.append("  old choice on the new mix: it is what runs now (trial 0, the "
                       f"baseline): {_measured(self.old_metrics)}")
        elif self.old_check is not None:
            out.append(f"  old choice on the new mix (trial {self.old_trial}): "
                       f"{_measured(self.old_metrics)}; vs the deployed settings "
                       f"{pct(self.old_check)}")
        else:
            out.append(f"  old choice on the new mix (trial {self.old_trial}): "
                       f"{_measured(self.old_metrics)}; {self.old_note}")
        if self.new_check is None:
            out.append("  re-tune: no confirmed winner on the new mix (nothing beat the "
                       "deployed settings on paired repeats)")
            if self.best_unconfirmed is not None:
                b = self.best_unconfirmed
                out.append(f"  best candidate, unconfirmed (trial {b.trial}): {pct(b)}"
                           + (f", {b.problem}" if b.problem else ""))
        else:
            out.append(f"  re-tune winner (trial {self.new_trial}): "
                       f"{_measured(self.new_metrics)}; vs the deployed settings "
                       f"{pct(self.new_check)}")
        if self.recovered_percent is not None and self.recovered_ci is not None:
            lo, hi = self.recovered_ci
            out.append(f"  recovered by the re-tune (new winner vs old winner, same "
                       f"replicates): {self.recovered_percent:+.1f} % (95 % interval "
                       f"{lo:+.1f} % to {hi:+.1f} %, {self.pairs} pairs)")
        return out


def _measured(m: dict[str, float]) -> str:
    parts = []
    if "busbw_norm" in m:
        parts.append(f"busbw/line {m['busbw_norm']:.3f}")
    if "p99_us" in m:
        parts.append(f"probe p99 {m['p99_us']:.3g} us")
    if "pause_us_per_s" in m:
        parts.append(f"PFC pause {m['pause_us_per_s']:.3g} us/s")
    return ", ".join(parts) or "no metrics recorded"


def summarize(new: Any) -> RetuneSummary:
    """The summary of a finished re-tune study (see the module docstring)."""
    import numpy as np

    from objectives.score import bootstrap_ci, equivalent_percent
    from tuner import study as studies

    ln = dict(new.user_attrs.get("lineage", {}))
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
    rec = rec_ci = None
    pairs = 0
    if new_check is not None:
        if old is None:  # the old winner is the baseline: recovered = the new winner's gain
            d = list(new_check.diffs)
        elif old_check is not None and old_check.diffs and new_check.trial != old.number:
            n = min(len(new_check.diffs), len(old_check.diffs))
            d = [a - b for a, b in zip(new_check.diffs[:n], old_check.diffs[:n], strict=True)]
        else:
            d = []
        if d:
            lo, hi = bootstrap_ci(d, seed=len(d))
            rec = equivalent_percent(float(np.mean(d)))
            rec_ci = (equivalent_percent(lo), equivalent_percent(hi))
            pairs = len(d)
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
        best_unconfirmed=conf.best if conf is not None and win is None else None)
