"""The end of a study: confirm the top candidates against the baseline, then keep the winner.

The top candidates and the baseline are measured interleaved on fresh paired placements and
the winner is confirmed or not (``objectives.verdict``); with ``keep_best`` the confirmed
winner's settings are re-applied and verified (never an unconfirmed trial's).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from objectives.measurement import Measurement
from objectives.verdict import judge as judge_confirmation
from objectives.verdict import winner_of
from safety.monitor import judge
from tuner import study as studies
from tuner import study_store
from tuner.errors import ApplyError, MeasurementError, SafetyAbort
from tuner.phases.trial import measure, stripped
from tuner.settings import Settings
from tuner.study import Confirmation

if TYPE_CHECKING:
    from tuner.loop import StudyRunner

# Confirmation replicates are drawn per study from this range: fresh placements, never the
# study's own (0..repeats-1), and different in every study.
CONFIRM_SEEDS = (1_000_000, 2**31 - 1)


def confirmation_seeds(n: int, study_name: str, sampler_seed: int | None) -> list[int]:
    """``n`` distinct placement numbers for a study's confirmation, recorded with it: drawn
    from the study's name and the sampler seed, so every study gets its own (a default name
    carries its start time) while a named study with a fixed seed can be reproduced."""
    rng = np.random.default_rng([zlib.crc32(study_name.encode()), sampler_seed or 0])
    seeds: list[int] = []
    while len(seeds) < n:
        x = int(rng.integers(*CONFIRM_SEEDS))
        if x not in seeds:
            seeds.append(x)
    return seeds


def run(ctx: StudyRunner) -> None:
    """Measure the top candidates and the baseline interleaved on fresh placements
    (baseline, candidate 1, candidate 2, ... per placement), save every measurement, and
    judge each candidate from them alone (``objectives.verdict.judge``)."""
    assert ctx.desc is not None and ctx.tx is not None
    b = ctx.exp.budget
    cands = studies.candidates(ctx.study, b.confirm_top_k)
    labels = {f"warm:{label}" for label, _ in ctx.warm}
    cands += [o for o in studies.outcomes(ctx.study)
              if o.role in labels and o.candidate and o.values not in [c.values for c in cands]]
    if b.confirm_repeats <= 0:
        return
    seeds = _seeds(ctx)
    n = len(seeds) if cands else 0
    ctx.on_event("confirm", {"candidates": [c.number for c in cands], "repeats": n})
    trial_ms: dict[int, list[Measurement]] = {c.number: [] for c in cands}
    base_ms: list[Measurement] = []
    problem: dict[int, str] = {c.number: "" for c in cands}
    folder = ctx.trial_dir / "confirmation"
    for i, rep in enumerate(seeds[:n]):
        base = measure(ctx, rep, abort=False)
        base_ms.append(base)
        _save(folder / f"baseline-p{rep}.json", base)
        for c in cands:
            if problem[c.number]:
                continue
            settings = Settings.uniform(ctx.desc.canary_switches, ctx.desc.canary_nics,
                                        c.values)
            try:
                with ctx.tx.applied(settings, c.number):
                    m = measure(ctx, rep)
                found = judge(m, ctx.exp.safety, ctx.window_s)
                if found:
                    problem[c.number] = f"rolled_back:{found[0].code}"
            except SafetyAbort as exc:
                problem[c.number] = f"rolled_back:{exc.reason}"
            except (ApplyError, MeasurementError) as exc:
                problem[c.number] = f"failed: {exc}"
            if not problem[c.number]:
                trial_ms[c.number].append(m)
                _save(folder / f"trial-{c.number:04d}-p{rep}.json", m)
            ctx.on_event("confirm_step", {"done": i * len(cands) + cands.index(c) + 1,
                                          "total": n * len(cands)})
    checks = judge_confirmation(base_ms, trial_ms, problem, ctx.cfg)
    win = winner_of(checks)
    conf = Confirmation(candidates=checks, paired_repeats=n, winner=win, seeds=seeds[:n],
                        placements=ctx.desc.facts.get("placements", "vary"))
    study_store.record(ctx.study, confirmation=conf.stored(str(folder)))
    ctx.on_event("confirmed", {"confirmation": conf})


def _seeds(ctx: StudyRunner) -> list[int]:
    """The study's confirmation placements: drawn once, recorded, kept across a resume."""
    want = ctx.exp.budget.confirm_repeats
    seeds = study_store.info(ctx.study).confirmation_seeds
    if len(seeds) < want:
        seeds = confirmation_seeds(want, ctx.study_name, ctx.exp.sampler.seed)
        study_store.record(ctx.study, confirmation_seeds=seeds)
    return [int(x) for x in seeds][:want]


def _save(path: Path, m: Measurement) -> None:
    """One confirmation measurement, for audit (every effect is recomputable from them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stripped(m).model_dump_json(indent=1), encoding="utf-8")


def keep_winner(ctx: StudyRunner) -> str:
    """Re-apply the confirmed winner's settings and verify them; journal ``kept``."""
    assert ctx.desc is not None and ctx.tx is not None
    win = studies.winner(ctx.study)
    if win is None:
        return "baseline"
    settings = Settings.uniform(ctx.desc.canary_switches, ctx.desc.canary_nics, win.values)
    ctx.tx.keep(settings, win.number)
    study_store.record(ctx.study, kept_trial=win.number)
    return f"kept:{win.number}"
