"""Search benchmark: the default sampler (``twin``) against TPE, random search, a
random-coordinate hill climber, a rule-based ECN-window shifter and the warm starts alone, on
the shipped rocesim experiments and on held-out scenarios (bench/scenarios/), with the same
canary budget and several sampler seeds each.

Every study runs the real loop (``tuner.loop.StudyRunner``: static limits, guarded change, live
monitor, paired scoring, early stopping, confirmation) on a simulated canary with tracking off;
the samplers only propose. The fair clock is *simulated canary time*: the simulated seconds the
canary spent measuring (baseline, trials, drift checks and confirmation).

"Best known" per scenario is the best study score (paired, on the study's replicates -- the same
for every study of a scenario, so a setting scores the same in every study) that met every
guardrail in the longest run of any method: the long TPE run stored in
``bench/search-best-known.json`` (``--long`` measures it again) or any study of this run. The
results of every study go to ``bench/search-results.json``; the tables and the convergence
plots (``docs/img/search-<scenario>.png``) are written from them into the ``search`` section of
docs/benchmarks.md (between ``<!-- search:start -->`` and ``<!-- search:end -->``; other
sections are kept). Run::

    .venv/bin/python bench/search.py [--seeds 5] [--trials 25] [--long] [--report-only]

``--screen`` also runs the default sampler with ``screen: twin`` on every scenario: every screened
proposal is measured afterwards on the real (simulated) canary, on the study's replicates, to
know the truth.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"
BEST = ROOT / "bench" / "search-best-known.json"
RESULTS = ROOT / "bench" / "search-results.json"
START, END = "<!-- search:start -->", "<!-- search:end -->"

# The shipped experiments, and scenarios each written before a method changed and never
# adjusted afterwards (bench/scenarios/: a method is judged on them, not fitted to them).
SCENARIOS = {"quick": "experiments/quick.yaml", "moe-mix": "experiments/moe-mix.yaml",
             "allreduce-400g": "experiments/allreduce-400g.yaml",
             "fsdp-200g-2nic": "bench/scenarios/fsdp-200g-2nic.yaml",
             "moe-100g-deep": "bench/scenarios/moe-100g-deep.yaml",
             "single-200g-incast": "bench/scenarios/single-200g-incast.yaml",
             "leafspine-200g-tenant": "bench/scenarios/leafspine-200g-tenant.yaml",
             "leafspine-100g-lossless-tight": "bench/scenarios/leafspine-100g-lossless-tight.yaml",
             "leafspine-200g-alltoall-shallow":
                 "bench/scenarios/leafspine-200g-alltoall-shallow.yaml"}
DEFAULT = "twin"  # the default sampler (tuner/experiment.py SamplerSpec), judged by _targets
METHODS = [DEFAULT, "tpe", "random", "hillclimb", "ecn-shifter", "static"]
ALL_METHODS = [*METHODS, "local-tpe"]  # local-tpe: on request (--methods)
REACH = 0.98  # "reached": a feasible trial scoring at least 98 % of the best known score


def _experiment(scenario: str, *, method: str, seed: int, trials: int, screen: bool = False,
                overrides: dict[str, Any] | None = None) -> tuple[Any, str]:
    from tuner.experiment import load_experiment

    path = ROOT / SCENARIOS[scenario]
    exp = load_experiment(path)
    sampler = "random" if method == "static" else method
    upd: dict[str, Any] = {
        "results_dir": tempfile.mkdtemp(prefix=f"ecntune-bench-{scenario}-"),
        "tracking": exp.tracking.model_copy(update={"enabled": False}),
        "budget": exp.budget.model_copy(update={"trials": trials, "wall_time_s": 1e9}),
        "sampler": exp.sampler.model_copy(update={"name": sampler, "seed": seed}),
    }
    # The samplers are compared on their own; the twin screen (which quick.yaml and moe-mix.yaml
    # turn on) is measured separately, with --screen.
    upd["screen"] = exp.screen.model_copy(update={"mode": "twin" if screen else "off"})
    upd.update(overrides or {})
    return exp.model_copy(update=upd), path.read_text(encoding="utf-8")


def warm_count(exp: Any) -> int:
    """How many warm starts the loop enqueues for ``exp`` (those equal to the baseline drop)."""
    from safety.limits import PfcThreshold, kmax_ceiling
    from tuner.cluster.sim import SimCluster
    from tuner.space import build_space
    from tuner.warm_starts import warm_starts

    c = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current))
    desc, base = c.describe(), c.snapshot().flat()
    space = build_space(exp)
    seen = {tuple(sorted(space.params_of(base).items()))}
    pfc = PfcThreshold.from_facts(desc.facts)
    for w in warm_starts(desc.nic_gbps, kmax_ceiling(pfc, exp.safety) if pfc else None):
        v = dict(base, kmin_bytes=w.kmin_bytes, kmax_bytes=w.kmax_bytes,
                 pmax_percent=w.pmax_percent)
        v.update(space.fixed)
        seen.add(tuple(sorted(space.params_of(v).items())))
    return len(seen) - 1


def _truth(runner: Any, cluster: Any, values: dict[str, int]) -> dict[str, Any]:
    """Measure ``values`` on the canary as a trial would (every replicate, live monitor, post-hoc
    rules, paired constraints): what the screen's skip really prevented."""
    from objectives.score import score
    from safety.monitor import LiveMonitor, judge
    from tuner.errors import SafetyAbort
    from tuner.settings import Settings

    exp = runner.exp
    desc = cluster.describe()
    cluster.apply(Settings.uniform(desc.canary_switches, desc.canary_nics, values))
    ms = []
    verdict = "ok"
    try:
        for r in range(runner.repeats):
            mon = LiveMonitor(exp.safety, runner.window_s)
            try:
                m = cluster.measure(exp.workload, mon, replicate=r)
            except SafetyAbort as exc:
                verdict = f"rolled_back:{exc.reason}"
                break
            m = m.model_copy(update={"pause_series": mon.series})
            ms.append(m)
            found = judge(m, exp.safety, runner.window_s)
            if found:
                verdict = f"rolled_back:{found[0].code}"
                break
    finally:
        cluster.apply(runner.baseline_settings)
    out: dict[str, Any] = {"verdict": verdict, "score": None}
    if verdict == "ok" and ms:
        sc = score(ms, runner.baseline_ms, runner.cfg)
        bad = [k for k, v in sc.constraints.items() if v > 0]
        out.update(score=sc.scalar, verdict=f"infeasible:{bad[0]}" if bad else "ok")
    return out


def run_study(job: dict[str, Any]) -> dict[str, Any]:
    """One study (in a worker process); its trials, rollbacks, confirmation and canary time."""
    from tuner.cluster.sim import SimCluster
    from tuner.loop import StudyRunner

    t0, c0 = time.monotonic(), time.process_time()
    scenario, method, seed = job["scenario"], job["method"], job["seed"]
    exp, text = _experiment(scenario, method=method, seed=seed, trials=job["trials"],
                            screen=job.get("screen", False))
    if method == "static":
        exp = exp.model_copy(update={"budget": exp.budget.model_copy(
            update={"trials": warm_count(exp)})})
    cluster = SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current),
                         name=exp.name)
    clock: dict[int, float] = {}

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "trial":
            clock[data["outcome"].number] = cluster._clock_s

    runner = StudyRunner(exp, text, cluster, study_name=f"{scenario}-{method}-{seed}",
                         on_event=on_event)
    res = runner.run()
    trials = []
    for t in res.trials:
        trials.append({"number": t.number, "role": t.role, "verdict": t.verdict,
                       "score": t.score, "candidate": t.candidate,
                       "pause_us_per_s": t.metrics.get("pause_us_per_s"),
                       "p99_us": t.metrics.get("p99_us"), "canary_s": clock.get(t.number),
                       "values": t.values})
    conf = res.confirmation.summary() if res.confirmation else None
    if conf is not None:
        conf.pop("per_candidate", None)
    win = res.winner
    shown = win or res.baseline  # the canary's final settings: the winner's or the baseline's
    out: dict[str, Any] = {
        **{k: job[k] for k in ("scenario", "method", "seed", "trials")},
        "screen": job.get("screen", False), "repeats": res.repeats,
        "startup_trials": exp.sampler.startup_trials, "trials_run": trials,
        "rolled_back_share": res.rolled_back_share, "confirmation": conf,
        "winner": win.number if win else None,
        "winner_score": win.score if win else None,
        "winner_pause_us_per_s": shown.metrics.get("pause_us_per_s") if shown else None,
        "winner_p99_us": shown.metrics.get("p99_us") if shown else None,
        "winner_values": win.values if win else None,
        "canary_s": cluster._clock_s, "wall_s": time.monotonic() - t0,
        "cpu_s": time.process_time() - c0}
    if job.get("screen"):
        screened = [t for t in res.trials if t.verdict.startswith("screened")]
        out["screened"] = [{"number": t.number, "verdict": t.verdict, "values": t.values,
                            "truth": _truth(runner, cluster, t.values)} for t in screened]
    return out


# Analysis ----------------------------------------------------------------------------------
def _med(xs: list[Any]) -> float | None:
    xs = sorted(x for x in xs if x is not None and not math.isnan(x))
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def pct(score: float) -> float:
    return (2.0 ** score - 1.0) * 100.0


def best_so_far(study: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(trial number, canary seconds, best feasible score so far) after every trial."""
    best, out = 0.0, []
    for t in study["trials_run"]:
        if t["candidate"] and t["score"] is not None:
            best = max(best, t["score"])
        out.append((t["number"], t["canary_s"] or 0.0, best))
    return out


def _on_canary(t: dict[str, Any]) -> bool:
    """A trial that spent canary time (not the baseline, not refused or screened)."""
    return t["role"] != "baseline" and not t["verdict"].startswith(("rejected", "screened"))


def reach(study: dict[str, Any], target: float) -> tuple[int | None, float | None]:
    """(canary trials, canary seconds) until the first feasible trial scoring ``target``:
    warm starts count, the baseline and proposals never applied (refused, screened) do not."""
    n = 0
    for t in study["trials_run"]:
        n += _on_canary(t)
        if t["candidate"] and t["score"] is not None and t["score"] >= target:
            return n, t["canary_s"]
    return None, None


def best_known(studies: list[dict[str, Any]], stored: dict[str, Any]) -> dict[str, Any]:
    """Per scenario, the best study score meeting every guardrail in the stored long run
    (``--long``) or in any study of any method here, whichever is higher, and where it came
    from. A scenario's studies share its replicates, so their scores compare."""
    out = {sc: dict(b, source=f"TPE long run, {b['trials']} trials, seed {b['seed']}")
           for sc, b in stored.items()}
    for s in studies:
        cands = [t for t in s["trials_run"] if t["candidate"] and t["score"] is not None]
        if not cands:
            continue
        top = max(cands, key=lambda t: t["score"])
        known = out.get(s["scenario"], {}).get("score")
        if known is None or top["score"] > known:
            conf = (s["confirmation"] or {}) if s["winner"] == top["number"] else {}
            out[s["scenario"]] = {
                "trials": s["trials"], "seed": s["seed"], "score": top["score"],
                "values": top["values"], "trial": top["number"],
                "change_percent": conf.get("change_percent"),
                "ci95_low": conf.get("ci95_low"), "ci95_high": conf.get("ci95_high"),
                "source": f"{s['method']}{' + screen' if s['screen'] else ''}, "
                          f"{s['trials']} trials, seed {s['seed']}"}
    return out


def summarise(studies: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any]:
    """Per scenario and method: medians over seeds with (min, max)."""
    out: dict[str, Any] = {}
    for sc in SCENARIOS:
        known = best.get(sc, {}).get("score")
        target = REACH * known if known is not None else None
        for m in ALL_METHODS:
            runs = [s for s in studies if s["scenario"] == sc and s["method"] == m
                    and not s["screen"]]
            if not runs:
                continue
            row: dict[str, Any] = {"seeds": len(runs), "budget": runs[0]["trials"]}
            rs = [reach(s, target) if target is not None else (None, None) for s in runs]
            row["reached"] = sum(r[0] is not None for r in rs)
            # A seed that never reached counts as budget + 1 (censored) in the median.
            row["trials_to_98"] = [r[0] if r[0] is not None else None for r in rs]
            row["canary_s_to_98"] = [r[1] for r in rs]
            row["improvement"] = [
                (s["confirmation"] or {}).get("change_percent") if s["winner"] is not None
                else 0.0 for s in runs]
            row["ci"] = [((s["confirmation"] or {}).get("ci95_low"),
                          (s["confirmation"] or {}).get("ci95_high")) for s in runs]
            row["confirmed"] = sum(s["winner"] is not None for s in runs)
            row["rollbacks"] = [sum(t["verdict"].startswith("rolled_back")
                                    for t in s["trials_run"] if t["role"] != "baseline")
                                for s in runs]
            row["rb_share"] = [s["rolled_back_share"] for s in runs]
            screened = [s for s in studies if s["scenario"] == sc and s["method"] == m
                        and s["screen"]]
            row["rb_share_screen"] = [s["rolled_back_share"] for s in screened]
            row["pause"] = [s["winner_pause_us_per_s"] for s in runs]
            row["p99"] = [s["winner_p99_us"] for s in runs]
            row["canary_s"] = [s["canary_s"] for s in runs]
            row["best_study_score"] = [best_so_far(s)[-1][2] for s in runs]
            out.setdefault(sc, {})[m] = row
    return out


def _fmt_range(xs: list[Any], fmt: str = "{:.0f}", censored: int | None = None) -> str:
    cut = float(censored + 1) if censored is not None else None
    vals: list[float] = [float(x) for x in (x if x is not None else cut for x in xs)
                         if x is not None]
    if not vals:
        return "-"

    def f(v: float) -> str:
        if censored is not None and v > censored:
            return f">{censored}"
        return fmt.format(v)

    med = _med(vals)
    assert med is not None
    if min(vals) == max(vals):
        return f(med)
    return f"{f(med)} [{f(min(vals))}, {f(max(vals))}]"


def plot(studies: list[dict[str, Any]], best: dict[str, Any], scenario: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    colors = {"twin": "C4", "tpe": "C0", "local-tpe": "C5", "random": "C1", "hillclimb": "C2",
              "ecn-shifter": "C3", "static": "C7"}
    for m in ALL_METHODS:
        runs = [s for s in studies if s["scenario"] == scenario and s["method"] == m
                and not s["screen"]]
        if not runs:
            continue
        curves = [best_so_far(s) for s in runs]
        n = max(len(c) for c in curves)
        ys = np.array([[pct(c[min(i, len(c) - 1)][2]) for i in range(n)] for c in curves])
        x = np.arange(n)
        med = np.median(ys, axis=0)
        if m == "static":
            for ax in axes:
                ax.axhline(med[-1], color=colors[m], ls=":", label="static (best warm start)")
            continue
        axes[0].plot(x, med, color=colors[m], label=m)
        axes[0].fill_between(x, ys.min(axis=0), ys.max(axis=0), color=colors[m], alpha=0.15)
        for c in curves:
            axes[1].step([p[1] for p in c], [pct(p[2]) for p in c], where="post",
                         color=colors[m], alpha=0.5, lw=0.9)
        axes[1].plot([], [], color=colors[m], label=m)
    if best.get(scenario, {}).get("score") is not None:
        for ax in axes:
            ax.axhline(pct(REACH * best[scenario]["score"]), color="k", lw=0.8, ls="--",
                       label="98 % of best known")
    axes[0].set_xlabel("trial (0 = baseline; warm starts first; refused and screened count)")
    axes[1].set_xlabel("simulated canary time (s)")
    for ax in axes:
        ax.set_ylabel("best feasible study busbw change (%)")
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{scenario}: median over seeds, band = min..max")
    axes[1].set_title(f"{scenario}: every seed against the fair clock")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    path = IMG / f"search-{scenario}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _targets(summ: dict[str, Any]) -> list[str]:
    """Each target of the search issue for the default sampler, met or missed (and by how
    much), per scenario."""
    lines = []
    for sc, rows in summ.items():
        d = rows.get(DEFAULT)
        if d is None:
            continue
        b = d["budget"]
        others = [m for m in rows if m != DEFAULT and rows[m]["confirmed"]]
        if d["confirmed"] or others:
            need = min(4, d["seeds"]) if d["seeds"] < 5 else 4 * d["seeds"] // 5
            ok = d["confirmed"] >= need
            lines.append(
                f"- **{sc}, confirms a winner in >= 4 of 5 seeds**: "
                + ("met" if ok else f"missed by {need - d['confirmed']} seed(s)")
                + f" ({d['confirmed']} of {d['seeds']}; "
                + ", ".join(f"{m} {rows[m]['confirmed']}/{rows[m]['seeds']}" for m in rows
                            if m != DEFAULT) + ")")
        else:
            lines.append(f"- **{sc}, confirms a winner in >= 4 of 5 seeds**: not applicable: "
                         "no method confirmed a winner (keeping the baseline is the answer)")
        imp = _med(d["improvement"]) or 0.0
        refs = [m for m in ("hillclimb", "static") if m in rows]
        short = {m: (_med(rows[m]["improvement"]) or 0.0) - imp for m in refs}
        bad = {m: v for m, v in short.items() if v > 0}
        lines.append(
            f"- **{sc}, median confirmed busbw change >= the hill climber's and the warm "
            "starts'**: " + ("met" if not bad else "missed: " + ", ".join(
                f"{v:.1f} points below {m}" for m, v in bad.items()))
            + f" ({DEFAULT} {imp:+.1f} %; " + ", ".join(
                f"{m} {_med(rows[m]['improvement']) or 0.0:+.1f} %" for m in rows
                if m != DEFAULT) + ")")
        t_med = _med([x if x is not None else b + 1 for x in d["trials_to_98"]])
        if t_med is None:
            lines.append(f"- **{sc}, reaches 98 % of best known in <= 10 canary trials "
                         "(median)**: not applicable: no trial of any method met every "
                         "guardrail")
        else:
            lines.append(f"- **{sc}, reaches 98 % of best known in <= 10 canary trials "
                         "(median)**: " + ("met" if t_med <= 10 else
                                           f"missed by {_show(t_med, b)} - 10 trials")
                         + f" (median {_show(t_med, b)}; reached in {d['reached']} of "
                         f"{d['seeds']} seeds)")
        share = _med([x for x in d["rb_share"] if x is not None])
        if share is not None:
            ok = share <= 0.10
            lines.append(f"- **{sc}, with the screen off, rolls back <= 10 % of its canary "
                         "proposals after start-up (median)**: " + ("met" if ok else
                         f"missed by {share * 100 - 10:.0f} points") + f" ({share * 100:.0f} %)")
    return lines


def _show(v: float | None, budget: int) -> str:
    if v is None:
        return "-"
    return f">{budget}" if v > budget else f"{v:g}"


def screen_summary(studies: list[dict[str, Any]]) -> list[str]:
    runs = [s for s in studies if s["screen"]]
    if not runs:
        return []
    rows = ["| scenario | seeds | screened | storms prevented | other rollbacks prevented | "
            "infeasible prevented | good settings wrongly skipped (of which beat the "
            "baseline) | rolled back after start-up, screen on | screen off |",
            "|---|---|---|---|---|---|---|---|---|"]
    for sc in SCENARIOS:
        mine = [s for s in runs if s["scenario"] == sc]
        if not mine:
            continue
        plain = [s for s in studies if s["scenario"] == sc and s["method"] == mine[0]["method"]
                 and not s["screen"]]
        scr = [x for s in mine for x in s["screened"]]
        storm = sum(x["truth"]["verdict"] == "rolled_back:pfc_storm" for x in scr)
        rb = sum(x["truth"]["verdict"].startswith("rolled_back") for x in scr) - storm
        inf = sum(x["truth"]["verdict"].startswith("infeasible") for x in scr)
        good = [x for x in scr if x["truth"]["verdict"] == "ok"]
        better = sum((x["truth"]["score"] or 0) > 0 for x in good)
        on = _fmt_range([x * 100 for x in (s["rolled_back_share"] for s in mine)
                         if x is not None], "{:.0f} %")
        off = _fmt_range([x * 100 for x in (s["rolled_back_share"] for s in plain)
                          if x is not None], "{:.0f} %")
        rows.append(f"| {sc} | {len(mine)} | {len(scr)} | {storm} | {rb} | {inf} | "
                    f"{len(good)} ({better}) | {on} | {off} |")
    return rows


def render(studies: list[dict[str, Any]], best: dict[str, Any], meta: dict[str, Any]) -> str:
    summ = summarise(studies, best)
    lines = ["## Search (samplers against each other)", "",
             f"Produced by `bench/search.py` on {meta['date']} "
             f"({meta['machine']}; {meta['wall_min']:.0f} min wall, {meta['cpu_min']:.1f} min "
             f"CPU in studies; load average at start {meta['load']}).", "",
             f"Every study runs the full loop on a simulated canary (tracking off): baseline, "
             f"warm starts, then proposals up to a budget of **{meta['trials']} trials**, "
             f"paired replicates (`repeats: auto`), early stopping, and the end-of-study "
             f"confirmation (top 3, 8 interleaved paired repeats). Sampler seeds 0, 1, ... per "
             f"method (up to {meta['seeds']}; how many is the *reached* column's denominator; "
             "`ecn-shifter` is a deterministic rule, so its seeds agree). The simulated fabric, "
             "and its paired replicates are the same for every study of a scenario; each study "
             "draws its own confirmation placements (from its name). "
             "`static` is the baseline and the warm starts alone, confirmed the same way "
             "(sampler-independent: one run). Study scores are the paired busbw change in % "
             "(`objective.mode: primary`: busbw under per-placement guardrails); *confirmed* is "
             "the confirmation's busbw change on its own placements. "
             "`hillclimb` and `ecn-shifter` are `tuner/samplers.py`; `twin`, the default, is "
             "`tuner/twin_search.py` (the twin explores, the canary confirms; its twin trials "
             "are simulator time, not canary trials, and not in the budget). The scenarios "
             "under `bench/scenarios/` were written before `twin` existed and have not been "
             "adjusted since: the method is judged on them, not fitted to them.", "",
             "Best known (98 % line): the best study score meeting every guardrail in the "
             "longest run of any method (the long TPE run in `bench/search-best-known.json`, or "
             "any study below, whichever is higher):", "",
             "| scenario | from | best known study busbw change | its confirmed busbw change "
             "[95 % CI] | settings |", "|---|---|---|---|---|"]
    for sc, b in best.items():
        vals = ", ".join(f"{k}={v}" for k, v in sorted(b["values"].items())
                         if k in ("kmin_bytes", "kmax_bytes", "pmax_percent", "rpg_ai_rate",
                                  "rpg_hai_rate", "rpg_time_reset", "rpg_min_dec_fac",
                                  "min_time_between_cnps"))
        conf = (f"{b['change_percent']:+.1f} % [{b['ci95_low']:+.1f}, {b['ci95_high']:+.1f}]"
                if b.get("change_percent") is not None else "not the confirmed winner")
        known = (f"{pct(b['score']):+.1f} %" if b["score"] is not None
                 else "none: no trial met every guardrail")
        lines.append(f"| {sc} | {b['source']} | {known} | {conf} | {vals} |")
    lines += ["", "Per scenario and method: medians over seeds, [min, max] across seeds. "
              "*trials to 98 %*: canary trials (warm starts count; the baseline and proposals "
              "refused or screened do not) until the first feasible one scoring at least 98 % "
              "of the best known; `>N` = not within the budget. *confirmed*: the winner's "
              "confirmed busbw change, % (0 when nothing was confirmed: the canary stays on the "
              "baseline); *PFC* and *p99*: the winner's (or "
              "the baseline's) study measurements; *canary s*: simulated canary seconds of "
              "the whole study.", ""]
    for sc, rows in summ.items():
        lines += [f"### {sc}", "", f"![convergence on {sc}](img/search-{sc}.png)", "",
                  "| method | reached 98 % | trials to 98 % | canary s to 98 % | confirmed "
                  "busbw % | confirmed runs | best study busbw % | rollbacks | rolled "
                  "back after startup | PFC µs/s | p99 µs | canary s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m, r in rows.items():
            b = r["budget"]
            lines.append(
                f"| {m} | {r['reached']}/{r['seeds']} | "
                f"{_fmt_range(r['trials_to_98'], censored=b)} | "
                f"{_fmt_range([x for x in r['canary_s_to_98'] if x is not None], '{:.2f}')} | "
                f"{_fmt_range(r['improvement'], '{:+.1f}')} | {r['confirmed']}/{r['seeds']} | "
                f"{_fmt_range([pct(x) for x in r['best_study_score']], '{:+.1f}')} | "
                f"{_fmt_range(r['rollbacks'])} | "
                f"{_fmt_range([x * 100 for x in r['rb_share'] if x is not None], '{:.0f} %')} "
                f"| {_fmt_range(r['pause'])} | {_fmt_range(r['p99'], '{:.1f}')} | "
                f"{_fmt_range(r['canary_s'], '{:.2f}')} |")
        lines.append("")
    lines += [f"### Targets (the default sampler, `{DEFAULT}`)", "", *_targets(summ), ""]
    scr = screen_summary(studies)
    if scr:
        lines += ["### The default with `screen: twin`", "",
                  f"`{DEFAULT}` with `screen: twin`, same seeds and budget, against the same "
                  "without it. Every screened proposal was measured afterwards on the canary "
                  "itself (all paired replicates, live monitor, post-hoc rules, constraints) to "
                  "know the truth: *storms prevented* = the canary rolled it back for a PFC "
                  "storm; *good settings wrongly skipped* = the canary measured it safe and "
                  "feasible.", "", *scr, ""]
    return "\n".join(lines)


def write_doc(text: str, start: str = START, end: str = END) -> None:
    """``text`` as the section between ``start`` and ``end`` of docs/benchmarks.md."""
    from doc_sections import write_section

    write_section(DOC, start, end, text)


def _pool_map(jobs: list[dict[str, Any]], procs: int) -> list[dict[str, Any]]:
    out = []
    with get_context("spawn").Pool(procs) as pool:
        for i, r in enumerate(pool.imap_unordered(run_study, jobs), 1):
            print(f"[{i}/{len(jobs)}] {r['scenario']} {r['method']} seed {r['seed']}"
                  f"{' screen' if r['screen'] else ''}: {r['wall_s']:.0f} s wall, "
                  f"best {best_so_far(r)[-1][2]:+.3f}, winner {r['winner']}", flush=True)
            out.append(r)
    return out


def measure_best(scenarios: list[str], trials: int, procs: int) -> dict[str, Any]:
    jobs = [{"scenario": sc, "method": "tpe", "seed": 0, "trials": trials} for sc in scenarios]
    best = json.loads(BEST.read_text()) if BEST.exists() else {}
    for r in _pool_map(jobs, procs):
        # The best feasible study score of the long run, confirmed or not: a scenario where the
        # long run confirms nothing still has a best known to measure the others against.
        cands = [t for t in r["trials_run"] if t["candidate"] and t["score"] is not None]
        if not cands:  # nothing to reach: the reach columns say so
            best[r["scenario"]] = {"trials": trials, "seed": 0, "score": None, "values": {},
                                   "change_percent": None}
            continue
        top = max(cands, key=lambda t: t["score"])
        conf = (r["confirmation"] or {}) if r["winner"] == top["number"] else {}
        best[r["scenario"]] = {"trials": trials, "seed": 0, "score": top["score"],
                               "values": top["values"], "trial": top["number"],
                               "change_percent": conf.get("change_percent"),
                               "ci95_low": conf.get("ci95_low"),
                               "ci95_high": conf.get("ci95_high")}
    BEST.write_text(json.dumps(best, indent=1), encoding="utf-8")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=25)
    ap.add_argument("--long", type=int, default=0,
                    help="measure the best known with a TPE run of this many trials first")
    ap.add_argument("--screen", action="store_true", help="also measure screen: twin")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--append", action="store_true",
                    help="keep bench/search-results.json's other studies: these replace only "
                         "the earlier studies of the same scenario, method and screen")
    ap.add_argument("--report-only", action="store_true",
                    help="re-render the section from bench/search-results.json")
    a = ap.parse_args()
    scen = [s for s in a.scenarios.split(",") if s]
    unknown = [s for s in scen if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"--scenarios: unknown {unknown}; known: {', '.join(SCENARIOS)}")
    t0 = time.monotonic()
    load = f"{os.getloadavg()[0]:.1f}"
    if a.report_only:
        data = json.loads(RESULTS.read_text(encoding="utf-8"))
        studies, meta = data["studies"], data["meta"]
    else:
        if a.long:
            measure_best(scen, a.long, a.procs)
        jobs = []
        for sc in scen:
            for m in a.methods.split(","):
                seeds = range(a.first_seed, a.first_seed + a.seeds)
                for seed in ([0] if m == "static" else seeds):
                    if m == "static" and a.first_seed:
                        continue
                    jobs.append({"scenario": sc, "method": m, "seed": seed,
                                 "trials": a.trials})
        if a.screen:
            jobs += [{"scenario": sc, "method": DEFAULT, "seed": s, "trials": a.trials,
                      "screen": True} for sc in scen
                     for s in range(a.first_seed, a.first_seed + a.seeds)]
        jobs.sort(key=lambda j: j["scenario"] != "moe-mix")  # the slowest first
        studies = _pool_map(jobs, a.procs)
        wall = (time.monotonic() - t0) / 60
        if a.append:
            old = json.loads(RESULTS.read_text(encoding="utf-8"))
            redone = {(s["scenario"], s["method"], s["screen"]) for s in studies}
            studies = [s for s in old["studies"]
                       if (s["scenario"], s["method"], s["screen"]) not in redone] + studies
            wall += old["meta"]["wall_min"]
            load = old["meta"]["load"]
        meta = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores shared, Python "
                           f"{platform.python_version()}, {a.procs} studies in parallel",
                "wall_min": wall,
                "cpu_min": sum(s["cpu_s"] for s in studies) / 60, "load": load,
                "trials": a.trials,
                "seeds": max(len({s["seed"] for s in studies if s["scenario"] == sc
                                  and s["method"] == DEFAULT and not s["screen"]})
                             for sc in SCENARIOS if any(s["scenario"] == sc for s in studies))}
        RESULTS.write_text(json.dumps({"meta": meta, "studies": studies}, indent=0),
                           encoding="utf-8")
    best = best_known(studies, json.loads(BEST.read_text(encoding="utf-8")))
    for sc in {s["scenario"] for s in studies}:
        plot(studies, best, sc)
    write_doc(render(studies, best, meta))
    print(f"wrote {DOC} and {IMG}/search-*.png")


if __name__ == "__main__":
    main()
