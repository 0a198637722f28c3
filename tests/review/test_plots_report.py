"""Plots and the report: the pure helpers on hand-made trials (exact numbers), then the report
of a real short study (the session's ``before`` study) through ``ecntune report``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from click.testing import CliRunner

from objectives.measurement import CollectiveResult
from tests.review.conftest import Study
from tuner import plots
from tuner.cli import main
from tuner.cluster.sim import timeseries_json
from tuner.report import (
    VERDICT_TEXT,
    StudyView,
    change,
    headline_rows,
    headline_sentence,
    load,
    markdown,
    render_html,
    settings_title,
    verdict_rows,
    verdict_summary,
    write_report,
)
from tuner.study import CandidateCheck, Confirmation, TrialOutcome

BASE_VALUES = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax_percent": 5}


def outcome(n: int, verdict: str, score: float | None, **metrics: float) -> TrialOutcome:
    values = dict(BASE_VALUES) if verdict == "baseline" else {
        "kmin_bytes": 10_000 * (n + 1), "kmax_bytes": 40_000 * (n + 1), "pmax_percent": n + 1}
    state = {"ok": "COMPLETE", "baseline": "COMPLETE", "rolled_back": "PRUNED",
             "rejected": "PRUNED"}.get(verdict.split(":")[0], "FAIL")
    return TrialOutcome(number=n, state=state, verdict=verdict, values=values, score=score,
                        metrics={"score": score, **metrics} if score is not None else metrics,
                        is_baseline=verdict == "baseline")


TRIALS = [
    outcome(0, "baseline", 0.30, busbw_norm=0.20, p99_us=900.0, pause_us_per_s=50.0),
    outcome(1, "ok", 0.25, busbw_norm=0.18, p99_us=500.0, pause_us_per_s=10.0),
    outcome(2, "rolled_back:pfc_storm", None, pause_us_per_s=600_000.0),
    outcome(3, "ok", 0.40, busbw_norm=0.30, p99_us=300.0, pause_us_per_s=0.0),
    outcome(4, "rejected:kmax_above_pfc_threshold", None),
    outcome(5, "ok", 0.35, busbw_norm=0.35, p99_us=700.0, pause_us_per_s=5.0),
    outcome(6, "failed:measurement", None),
]


def view() -> StudyView:
    return StudyView(name="hand", storage="sqlite:///x.db", mode="scalar", trials=TRIALS,
                     baseline=TRIALS[0], best=TRIALS[3],
                     verdict_details={2: "leaf0/Ethernet0: paused 61.0% of the time"})


def test_best_so_far_skips_unscored_and_rolled_back() -> None:
    assert plots.best_so_far(TRIALS) == [(0, 0.30), (1, 0.30), (3, 0.40), (5, 0.40)]


def test_pareto_front_busbw_up_p99_down() -> None:
    pts = [(t.number, t.metrics["busbw_norm"], t.metrics["p99_us"]) for t in TRIALS
           if "busbw_norm" in t.metrics]
    # trial 5 has the most busbw, trial 3 the lowest p99; 0 and 1 are dominated by 3
    assert plots.pareto_front(pts) == [5, 3]
    assert plots.pareto_front([(1, 1.0, 1.0), (2, 1.0, 1.0)]) == [1]


def test_kind_groups_verdicts() -> None:
    assert [plots.kind(t.verdict) for t in TRIALS] == [
        "baseline", "ok", "rolled_back", "ok", "rejected", "ok", "failed"]
    assert plots.kind("interrupted") == "other"


def test_every_verdict_kind_is_drawn_and_counted() -> None:
    """A quick.yaml study screens out most proposals: a kind without a mark vanished from the
    convergence plot and its badge was drawn white on white."""
    every = [*TRIALS, outcome(7, "screened:pfc_storm", None), outcome(8, "screened:busbw_floor",
             None), outcome(9, "infeasible:tenant_goodput", 0.2), outcome(10, "pruned:early_stop",
             0.1), outcome(11, "interrupted", None)]
    fig = plots.convergence(every)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:9] == [
        "ok (3)", "baseline (trial 0) (1)", "rolled back (1)",
        "infeasible (measured; broke a guardrail) (1)", "stopped early (1)",
        "rejected by safety limits (not applied) (1)",
        "screened out by the twin (not applied) (2)", "failed (1)", "interrupted/other (1)"]
    v = StudyView(name="hand", storage="sqlite:///x.db", mode="scalar", trials=every,
                  baseline=every[0], best=every[3])
    badges = re.findall(r"<span style='background:(#[0-9a-f]{6})'>([a-z ]+) (\d+)</span>",
                        render_html(v, {}))
    assert [(name, int(n)) for _, name, n in badges] == [
        ("ok", 3), ("baseline", 1), ("rolled back", 1), ("infeasible", 1), ("pruned", 1),
        ("rejected", 1), ("screened", 2), ("failed", 1), ("other", 1)]
    assert len({colour for colour, name, _ in badges if name != "other"}) == 8
    meaning = {row[0]: row[2] for row in verdict_summary(v)[1]}
    assert meaning["screened:pfc_storm"] == (
        f"the digital twin predicted it ({VERDICT_TEXT['pfc_storm']}); never applied on the "
        "canary")
    assert meaning["infeasible:tenant_goodput"] == VERDICT_TEXT["tenant_goodput"]


def test_iteration_busbw_scales_by_time() -> None:
    c = CollectiveResult(name="all_reduce", size_bytes=1 << 22, ranks=8, time_us=150.0,
                         algbw_gbytes_per_s=5.0, busbw_gbytes_per_s=10.0,
                         iteration_times_us=[100.0, 200.0])
    assert plots.iteration_busbw(c) == [15.0, 7.5]  # mean time 150 µs -> 10 GB/s


def test_settings_diff_rows() -> None:
    rows = plots.settings_diff({"kmin_bytes": 524_288, "kmax_bytes": 2_097_152,
                                "pmax_percent": 20}, BASE_VALUES)
    assert rows == [
        {"knob": "kmin_bytes", "unit": "bytes", "baseline": 1_048_576, "trial": 524_288,
         "changed": True, "ratio": 0.5},
        {"knob": "kmax_bytes", "unit": "bytes", "baseline": 2_097_152, "trial": 2_097_152,
         "changed": False, "ratio": 1.0},
        {"knob": "pmax_percent", "unit": "%", "baseline": 5, "trial": 20, "changed": True,
         "ratio": 4.0}]


def test_timeseries_roundtrip_through_sim_raw(tmp_path: Path) -> None:
    n = 1000
    res = SimpleNamespace(timeseries_port="leaf0/Ethernet3", timeseries={
        "t_us": np.arange(n, dtype=float), "queue_bytes": np.full(n, 2048.0),
        "paused": np.r_[np.zeros(500, dtype=np.int64), np.ones(500, dtype=np.int64)],
        "rate_gbps": np.full(n, 50.0)})
    raw = json.loads(timeseries_json(res, points=400))
    assert len(raw["t_us"]) == 334  # every 3rd of 1000 samples: at most 400
    ts = plots.Timeseries.from_raw({"rocesim_timeseries": json.dumps(raw)})
    assert ts is not None and ts.port == "leaf0/Ethernet3"
    assert ts.t_us[:3] == [0.0, 3.0, 6.0] and sum(ts.paused) == 167
    assert plots.Timeseries.from_raw({"rocesim": "{}"}) is None
    png = plots.save(plots.timeseries(ts, 1000, 4000), tmp_path / "ts.png", tight=False)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_change_classes() -> None:
    assert change(100.0, 50.0, False) == ("-50.0 %", "good")
    assert change(100.0, 50.0, True) == ("-50.0 %", "bad")
    assert change(0.0, 7.0, None) == ("new", "info")
    assert change(3.0, 3.0, True) == ("±0 %", "same")


def test_report_tables_and_html_from_hand_made_trials() -> None:
    v = view()
    rows = {r[0]: r for r in headline_rows(v)}
    assert rows["score"][1:] == ["0.3", "0.4", "+0.400", "good"]  # unitless: a difference
    assert rows["probe p99 latency (µs)"][3:] == ["-66.7 %", "good"]
    head, vrows = verdict_rows(v)
    assert [r[1] for r in vrows] == ["rolled_back:pfc_storm", "rejected:kmax_above_pfc_threshold",
                                     "failed:measurement"]
    assert "paused 61.0% of the time" in vrows[0][2]
    assert "PFC would pause before ECN" in vrows[1][2]  # no detail: the meaning
    assert verdict_summary(v)[1] == [
        ["rolled_back:pfc_storm", "1",
         VERDICT_TEXT["pfc_storm"] + "; the trial was stopped and the baseline restored"],
        ["rejected:kmax_above_pfc_threshold", "1", VERDICT_TEXT["kmax_above_pfc_threshold"]],
        ["failed:measurement", "1", VERDICT_TEXT["measurement"]]]
    page = render_html(v, {"convergence": b"\x89PNG-fake"})
    assert page.count("data:image/png;base64,") == 1
    assert ("Trial 3 leads the search (paired score +0.400) but was not confirmed") in page
    assert "NOT confirmed: keep the baseline" in page
    assert not re.search(r"(src|href)=['\"](?!data:)", page)  # nothing outside the file
    md = markdown(v, {"convergence": "img/convergence.png"})
    assert "| **kmin_bytes** | bytes | 1,048,576 | **40,000** |" in md
    assert "![Convergence](img/convergence.png)" in md


def test_report_of_a_real_study(studies: dict[str, Study], tmp_path: Path) -> None:
    st = studies["before"]
    v = load(st.name, st.storage)
    assert [t.number for t in v.trials] == [t.number for t in st.result.trials]
    assert v.best is not None and st.result.best is not None
    shown = st.result.winner or st.result.best  # the one winner policy (tuner.study)
    assert v.best.number == shown.number and v.winner == st.result.winner
    victim = tmp_path / "victim"  # a symlink planted as report.html is replaced, not followed
    victim.write_text("precious\n")
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.html").symlink_to(victim)
    files = write_report(v, tmp_path / "rep")
    assert victim.read_text() == "precious\n" and not files.html.is_symlink()
    page = files.html.read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == len(files.images) >= 3
    assert not re.search(r"(src|href)=['\"](?!data:)", page)
    not_ok = [t for t in st.result.trials if t.verdict.split(":")[0] not in ("ok", "baseline")]
    assert len(verdict_rows(v)[1]) == len(not_ok)
    for name, path in files.images.items():
        assert path.read_bytes()[:4] == b"\x89PNG", name


def test_ecntune_report_cli(studies: dict[str, Study], tmp_path: Path) -> None:
    st = studies["after"]
    out = tmp_path / "cli-report"
    res = CliRunner().invoke(main, ["report", "--storage", st.storage, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"study {st.name}:" in res.output  # the newest study is the default
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.startswith(f"# ecntune study `{st.name}`")
    assert f"## {settings_title(load(st.name, st.storage))}" in md and "## Convergence" in md
    assert (out / "img" / "convergence.png").is_file()
    bad = CliRunner().invoke(main, ["report", "nope", "--storage", st.storage])
    assert bad.exit_code == 2 and "no study 'nope'" in bad.output


def test_confirmation_sentence_and_panel(tmp_path: Path) -> None:
    v = view()
    def busbw(pct: float, lo: float, hi: float) -> dict[str, dict[str, object]]:
        return {"busbw": {"metric": "busbw", "unit": "GB/s", "change_percent": pct,
                          "ci95_low": lo, "ci95_high": hi, "baseline_mean": 8.0,
                          "candidate_mean": 8.0 * (1 + pct / 100), "per_placement": []}}

    won = CandidateCheck(trial=3, diffs=[0.5, 0.7], improvement_percent=51.6, ci95_low=41.4,
                         ci95_high=62.5, problem="", confirmed=True,
                         effects=busbw(51.6, 41.4, 62.5))
    lost = CandidateCheck(trial=5, diffs=[0.2, -0.3], improvement_percent=-3.4, ci95_low=-18.8,
                          ci95_high=14.9, problem="", confirmed=False,
                          effects=busbw(-3.4, -18.8, 14.9))
    v.confirmation = Confirmation(candidates=[won, lost], paired_repeats=2, winner=3)
    assert headline_sentence(v) == (
        "Trial 3 is the confirmed winner: busbw +51.6 % [+41.4, +62.5] (paired on 2 placements "
        "drawn for this study, baseline and candidates interleaved on each; 95 % t-intervals, "
        "Bonferroni-corrected for 2 candidates).")
    fig = plots.best_vs_baseline(TRIALS[0], TRIALS[3], confirm=v.confirmation)
    assert [a.get_title() for a in fig.axes][:1] == ["Winner #3, 2 paired repeats"]
    plots.save(fig, tmp_path / "bvb.png")
    v.confirmation = Confirmation(candidates=[lost], paired_repeats=2, winner=None)
    assert headline_sentence(v) == (
        "Nothing beat the baseline: the best candidate, trial 5, measured busbw -3.4 % "
        "[-18.8, +14.9] (paired on 2 placements drawn for this study, baseline and candidates "
        "interleaved on each; 95 % t-intervals; its interval includes 0); keep the current "
        "settings.")
    # On a backend that cannot vary the placement, the interval says what it is over.
    v.confirmation = Confirmation(candidates=[lost], paired_repeats=2, winner=None,
                                  placements="fixed")
    assert "2 repeats of ONE placement" in headline_sentence(v)
    v.confirmation = Confirmation(candidates=[], paired_repeats=0, winner=None)
    assert headline_sentence(v).startswith("No trial met every guardrail")
