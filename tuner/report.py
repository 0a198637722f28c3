"""One study as a self-contained HTML page and a Markdown summary (readable without MLflow).

The source is the Optuna storage (trial verdicts, knob values, metrics, scores) and the
measurement files the loop saved next to it (for the repeat spread); the plots come from
``tuner.plots`` and are inlined as base64 PNGs, so the page is one file that can be mailed or
attached to a change ticket. ``write_report`` is also what the loop logs into the study's
parent MLflow run at the end (artifact folder ``report/``).
"""

from __future__ import annotations

import base64
import html
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safety.files import write_file
from tuner.plots import COMPARE_METRICS, VERDICT_MARKS, kind

if TYPE_CHECKING:
    from objectives.measurement import Measurement
    from tuner.study import Confirmation, TrialOutcome

log = logging.getLogger("ecntune.report")

# What each verdict code means, for the operator reading why a trial was not kept.
VERDICT_TEXT: dict[str, str] = {
    "pfc_storm": "a port stayed paused for most of a whole storm window (or the pause-frame "
                 "rate crossed its limit) while traffic ran",
    "lossless_drops": "packets were dropped on the lossless (RoCE) priority",
    "crc_errors": "CRC errors appeared on a port",
    "pfc_watchdog": "the switch PFC watchdog detected a storm",
    "link_down": "a link went down during the trial",
    "timeout": "the measurement ran past its time limit",
    "busbw_loss": "bus bandwidth fell more than objective.guardrails.max_busbw_loss_percent "
                  "below the baseline's on some placement (a guardrail: never a winner)",
    "tenant_goodput": "a tenant sharing the RoCE priority lost more goodput than "
                      "objective.guardrails.max_tenant_loss_percent on some placement",
    "p99": "probe p99 rose above both objective.guardrails.p99_target_us and the baseline's "
           "p99 plus p99_allowance_percent on some placement",
    "pfc_pause": "PFC pause time above objective.guardrails.max_pfc_pause_us_per_s on some "
                 "placement",
    "early_stop": "its first paired replicates were clearly below the median trial; stopped "
                  "early to save canary time",
    "kmin_ge_kmax": "Kmin >= Kmax is not a valid ECN profile (never applied)",
    "kmax_above_pfc_threshold": "Kmax above the egress queue at which the ingress PGs cross "
                                "their PFC dynamic threshold, less its margin: PFC would pause "
                                "before ECN marks fully (never applied)",
    "rate_above_line_rate": "a DCQCN rate above the NIC line rate (never applied)",
    "out_of_range": "a knob outside its hardware range (never applied)",
    "unknown_knob": "a knob the device does not have (never applied)",
    "invalid_settings": "the settings model refused the combination (never applied)",
    "apply": "applying the settings or reading them back failed",
    "measurement": "the measurement itself failed",
}


def verdict_meaning(verdict: str) -> str:
    """What ``verdict`` (``kind:code``) means: the code's condition, and what became of the
    trial for the kinds where the code alone does not say it."""
    head, _, code = verdict.partition(":")
    text = VERDICT_TEXT.get(code or head, code or head)
    if head == "rolled_back":
        return f"{text}; the trial was stopped and the baseline restored"
    if head == "screened":
        return f"the digital twin predicted it ({text}); never applied on the canary"
    return text


# Headline rows of the baseline-vs-best table: (metric, label, higher is better or None).
HEADLINE: tuple[tuple[str, str, bool | None], ...] = (
    ("score", "score", True),
    ("busbw_norm", "bus bandwidth / line rate", True),
    ("p50_us", "probe p50 latency (µs)", False),
    ("p99_us", "probe p99 latency (µs)", False),
    ("p999_us", "probe p99.9 latency (µs)", False),
    ("pause_us_per_s", "PFC pause (µs per s per port)", False),
    ("pfc_pause_frames", "PFC pause frames received", False),
    ("ecn_marked_pkts", "ECN-marked packets", None),
    ("cnp_sent", "CNPs sent", None),
    ("lossless_drops", "lossless drops", False),
)
assert {k for k, _, _ in COMPARE_METRICS} <= {k for k, _, _ in HEADLINE}

PLOTS: tuple[tuple[str, str, str], ...] = (
    ("convergence", "Convergence",
     "Score of every trial (higher is better) and the best so far. Red crosses were rolled "
     "back by the safety checks, purple pluses were measured but broke a guardrail on some "
     "placement (busbw loss, tenant goodput, probe p99, PFC pause), grey and cyan triangles "
     "were never applied: rejected by the static limits or screened out by the digital twin."),
    ("best_vs_baseline", "Best trial against the baseline",
     "Left: each candidate's paired busbw change over the baseline on the placements drawn for "
     "the study, one dot per placement, with its 95 % t-interval corrected for the candidates "
     "(a winner's lies above 0, unless it fixes a guardrail the baseline breaks). Middle: "
     "the bus bandwidth of every iteration. Right: change of each headline metric, green "
     "where the best trial is better."),
    ("drift", "Baseline drift",
     "The baseline re-measured during the study on its own paired replicates: its paired "
     "score against the first measurement (0 = no drift)."),
    ("pareto", "Bandwidth, tail latency and PFC",
     "Each dot is a trial; right and down is better, colour is PFC pause time. The green line "
     "joins the trials no other trial beats on both axes."),
    ("importance", "Which knob mattered",
     "Share of the score's variance explained by each searched knob (Optuna's fANOVA)."),
    ("knob_slices", "Score by knob value",
     "Where each knob's good, bad and unsafe values lie, one panel per knob."),
)


@dataclass
class StudyView:
    """What a report shows about one study (plain data, see ``load``)."""

    name: str
    storage: str
    mode: str
    trials: list[TrialOutcome]
    baseline: TrialOutcome | None
    best: TrialOutcome | None
    pareto: list[TrialOutcome] = field(default_factory=list)
    experiment: str = ""
    created_at: float | None = None
    canary: dict[str, list[str]] = field(default_factory=dict)
    parent_run_id: str | None = None
    kept_trial: int | None = None
    details: dict[str, str] = field(default_factory=dict)
    measurement_paths: dict[int, str] = field(default_factory=dict)
    verdict_details: dict[int, str] = field(default_factory=dict)  # the violation, as logged
    confirmation: Confirmation | None = None  # paired re-measurement (``tuner.study``)
    winner: TrialOutcome | None = None  # the confirmed winner (``tuner.study.winner``)
    drift: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 1
    noise: dict[str, float] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)  # tuner.diagnose.record.lines
    study: Any = None  # the Optuna study (for Optuna's own plots); None when built by hand

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.trials:
            out[kind(t.verdict)] = out.get(kind(t.verdict), 0) + 1
        return out

    def measurement(self, number: int) -> Measurement | None:
        """The saved measurement of trial ``number`` (None if it has none or it is gone)."""
        from objectives.measurement import Measurement

        path = self.measurement_paths.get(number)
        if not path or not Path(path).is_file():
            return None
        return Measurement.model_validate_json(Path(path).read_text(encoding="utf-8"))


def load(study_name: str | None, storage: str) -> StudyView:
    """Read a study (default: the newest in ``storage``) from its Optuna storage."""
    from tuner import optuna_io, study_store
    from tuner import study as studies
    from tuner.diagnose import record
    from tuner.errors import ConfigError

    names = optuna_io.study_names(storage)
    if not names:
        raise ConfigError(f"no studies in {storage}; run `ecntune run EXPERIMENT` first")
    name = study_name or names[-1]
    study = optuna_io.load_study(name, storage)
    frozen = [t for t in optuna_io.trials(study)
              if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]
    trials = studies.outcomes(study)
    info = study_store.info(study)
    details: dict[str, str] = {}
    if info.experiment_yaml:
        try:
            from tuner.experiment import parse_experiment

            exp = parse_experiment(info.experiment_yaml, f"study {name}", i_know=True)
            details = {"backend": exp.fabric.backend, "sampler": exp.sampler.name,
                       "objective": exp.objective.mode,
                       "budget": f"{exp.budget.trials} trials"}
        except Exception as exc:  # an old file the model no longer accepts: report anyway
            log.warning("study %s: stored experiment unreadable (%s)", name, exc)
    tags = {t.number: study_store.tags(t) for t in frozen}
    return StudyView(
        name=name, storage=storage, mode=info.mode, trials=trials,
        baseline=next((t for t in trials if t.is_baseline and t.state == "COMPLETE"), None),
        best=studies.winner(study) or studies.best_unconfirmed(study),
        pareto=studies.pareto(study) if info.mode == "multi" else [],
        experiment=info.experiment_name or "", created_at=info.created_at or None,
        canary=info.canary, parent_run_id=info.mlflow_parent_run_id,
        kept_trial=info.kept_trial, details=details,
        measurement_paths={n: tg.measurement_path for n, tg in tags.items()
                           if tg.measurement_path},
        verdict_details={n: tg.detail for n, tg in tags.items() if tg.detail},
        confirmation=studies.confirmation(study), winner=studies.winner(study),
        drift=info.drift, repeats=info.repeats, noise=info.noise,
        findings=record.lines(info.findings, info.findings_accepted), study=study)


# Plots -------------------------------------------------------------------------------------
def render_plots(view: StudyView, out_dir: str | Path,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Path]:
    """The study's PNGs in ``out_dir`` (name -> path). A plot that cannot be drawn yet (too few
    trials) is left out; a plot that fails is logged and left out, never fatal."""
    from tuner import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    makers: dict[str, Callable[[], Any]] = {
        "convergence": lambda: plots.convergence(view.trials, f"Convergence of {view.name}"),
        "pareto": lambda: plots.pareto(view.trials),
        "knob_slices": lambda: plots.knob_slices(view.trials),
    }
    if view.baseline is not None and view.best is not None and not view.best.is_baseline:
        b, w = view.baseline, view.best
        makers["best_vs_baseline"] = lambda: plots.best_vs_baseline(
            b, w, view.measurement(b.number), view.measurement(w.number), view.confirmation)
    if view.drift:
        makers["drift"] = lambda: plots.drift(view.drift)
    if view.study is not None:
        makers["importance"] = lambda: plots.importance(view.study)
    paths: dict[str, Path] = {}
    for i, (name, make) in enumerate(makers.items(), 1):
        try:
            fig = make()
        except Exception as exc:  # one broken plot must not cost the whole report
            log.warning("plot %s failed: %s: %s", name, type(exc).__name__, exc)
            fig = None
        if fig is not None:
            paths[name] = plots.save(fig, out / f"{name}.png")
        if progress is not None:
            progress(i, len(makers))
    return paths


# Tables (shared by HTML and Markdown) ------------------------------------------------------
def fmt(v: float | int | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or float(v).is_integer() and abs(v) >= 100:
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def change(b: float | None, w: float | None, up: bool | None) -> tuple[str, str]:
    """(text, css class good/bad/same/info) of the change from ``b`` to ``w``."""
    if b is None or w is None:
        return "-", "same"
    if b == w:
        return "±0 %", "same"
    if b == 0:
        return "new", "info"
    pct = (w - b) / abs(b) * 100
    if round(pct, 1) == 0:
        return "±0 %", "same"
    if up is None:
        return f"{pct:+.1f} %", "info"
    return f"{pct:+.1f} %", "good" if (pct > 0) == up else "bad"


def score_change(w: float | None) -> tuple[str, str]:
    """(text, css class) for a paired search score: already relative to the baseline (0), in
    the mode's own unitless scale, so it is shown as the difference it is."""
    if w is None:
        return "-", "same"
    if round(w, 3) == 0:
        return "±0", "same"
    return f"{w:+.3f}", "good" if w > 0 else "bad"


def headline_rows(view: StudyView) -> list[list[str]]:
    """metric | baseline | best | change | class."""
    rows = []
    b = view.baseline.metrics if view.baseline else {}
    w = view.best.metrics if view.best else {}
    for key, label, up in HEADLINE:
        bv, wv = b.get(key), w.get(key)
        if bv is None and wv is None:
            continue
        text, cls = score_change(wv) if key == "score" else change(bv, wv, up)
        rows.append([label, fmt(bv), fmt(wv), text, cls])
    return rows


def settings_title(view: StudyView) -> str:
    if view.winner is not None:
        return f"Recommended settings (trial {view.winner.number}, confirmed)"
    return "Best candidate's settings (NOT confirmed: keep the baseline)"


def settings_rows(view: StudyView) -> list[list[str]]:
    """knob | unit | baseline | recommended | changed ('1' or '')."""
    from tuner.settings import KNOBS

    if view.best is None:
        return []
    base = view.baseline.values if view.baseline else {}
    rows = []
    for name, knob in KNOBS.items():
        if name not in view.best.values:
            continue
        b, w = base.get(name), view.best.values[name]
        rows.append([name, knob.unit, fmt(b), fmt(w), "1" if b != w else ""])
    return rows


def varied_knobs(view: StudyView) -> list[str]:
    from tuner.settings import KNOBS

    return [k for k in KNOBS
            if len({t.values.get(k) for t in view.trials if k in t.values}) > 1]


def best_rows(view: StudyView, limit: int = 5) -> tuple[list[str], list[list[str]]]:
    knobs = varied_knobs(view)
    head = ["trial", "score", "busbw/line", "p99 µs", "PFC µs/s", *knobs]
    ok = sorted((t for t in view.trials if kind(t.verdict) in ("ok", "baseline")
                 and t.score is not None), key=lambda t: -(t.score or 0.0))
    rows = []
    for t in ok[:limit]:
        m = t.metrics
        label = f"{t.number}{' (baseline)' if t.is_baseline else ''}"
        rows.append([label, fmt(t.score), fmt(m.get("busbw_norm")), fmt(m.get("p99_us")),
                     fmt(m.get("pause_us_per_s")), *(fmt(t.values.get(k)) for k in knobs)])
    return head, rows


def verdict_summary(view: StudyView) -> tuple[list[str], list[list[str]]]:
    """One row per verdict that kept a trial out: how many, and what it means."""
    counts: dict[str, int] = {}
    for t in view.trials:
        if kind(t.verdict) not in ("ok", "baseline"):
            counts[t.verdict] = counts.get(t.verdict, 0) + 1
    rows = [[v, str(n), verdict_meaning(v)]
            for v, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return ["verdict", "trials", "what it means"], rows


def verdict_rows(view: StudyView) -> tuple[list[str], list[list[str]]]:
    """Every trial not kept as ok: the violation, what it tried, what it measured."""
    knobs = [k for k in ("kmin_bytes", "kmax_bytes", "pmax_percent") if k in varied_knobs(view)]
    head = ["trial", "verdict", "violation", "busbw/line", "p99 µs", "PFC µs/s", *knobs]
    rows = []
    for t in view.trials:
        if kind(t.verdict) in ("ok", "baseline"):
            continue
        m = t.metrics
        why = view.verdict_details.get(t.number) or verdict_meaning(t.verdict)
        rows.append([str(t.number), t.verdict, why,
                     fmt(m.get("busbw_norm")), fmt(m.get("p99_us")),
                     fmt(m.get("pause_us_per_s")), *(fmt(t.values.get(k)) for k in knobs)])
    return head, rows


def headline_sentence(view: StudyView) -> str:
    """The paired, confirmed verdict of the study, in one sentence."""
    b = view.baseline
    if b is None:
        return "No baseline measurement yet."
    c = view.confirmation
    if c is None:
        best = view.best
        if best is None:
            return "No trial met every guardrail; keep the current settings."
        return (f"Trial {best.number} leads the search (paired score {best.score:+.3f}) but "
                "was not confirmed (the study stopped before its confirmation).")
    return confirmation_sentence(c)


def confirmation_sentence(c: Confirmation) -> str:
    """What the interleaved, paired re-measurement concluded, in each metric's own unit."""
    from objectives.verdict import winner_line
    from tuner.study import interval_note

    best = c.best
    if best is None:
        return "No trial met every guardrail, so nothing was confirmed: keep the baseline."
    note = interval_note(c)
    if c.winner is not None:
        trade = f" It {best.price}." if best.price else ""
        return f"Trial {best.trial} is the confirmed winner: {winner_line(best)} ({note}).{trade}"
    why = best.problem or "its interval includes 0"
    return (f"Nothing beat the baseline: the best candidate, trial {best.trial}, measured "
            f"{winner_line(best) or 'no effect'} ({note}; {why}); keep the current settings.")


# Markdown ----------------------------------------------------------------------------------
def _md_table(head: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "_none_\n"
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines) + "\n"


def markdown(view: StudyView, images: dict[str, str]) -> str:
    """The summary as Markdown; ``images`` maps plot name -> relative path."""
    counts = view.counts()
    out = [f"# ecntune study `{view.name}`", "", _meta_line(view), "",
           f"**{headline_sentence(view)}**", "", *_findings_md(view),
           "Trials: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), "",
           "## Baseline vs best", "",
           _md_table(["metric", "baseline", "best", "change"],
                     [r[:4] for r in headline_rows(view)]),
           f"## {settings_title(view)}", "",
           "Changed knobs in **bold**. Apply with the commands from "
           f"`ecntune export {view.name}`.", "",
           _md_table(["knob", "unit", "baseline", "recommended"],
                     [[f"**{r[0]}**" if r[4] else r[0], r[1], r[2],
                       f"**{r[3]}**" if r[4] else r[3]] for r in settings_rows(view)])]
    for name, title, text in PLOTS:
        if name in images:
            out += [f"## {title}", "", text, "", f"![{title}]({images[name]})", ""]
    out += ["## Best trials", "", _md_table(*best_rows(view)),
            "## Trials not kept: why", "", _md_table(*verdict_summary(view)),
            _md_table(*verdict_rows(view))]
    if view.pareto:
        out += ["## Pareto front (busbw ↑, p99 ↓)", "",
                ", ".join(f"trial {t.number}" for t in view.pareto), ""]
    out += ["---", _footer(view), ""]
    return "\n".join(out)


def _findings_md(view: StudyView) -> list[str]:
    """The findings the study ran under (the first line is the heading sentence)."""
    return [view.findings[0], "", *view.findings[1:], ""] if view.findings else []


def _meta_line(view: StudyView) -> str:
    parts = []
    if view.experiment:
        parts.append(f"experiment {view.experiment}")
    parts += [f"{k} {v}" for k, v in view.details.items()]
    if view.canary.get("switches"):
        parts.append(f"canary {', '.join(view.canary['switches'])} "
                     f"({len(view.canary.get('nics', []))} NICs)")
    if view.created_at:
        parts.append("started " + time.strftime("%Y-%m-%d %H:%M UTC",
                                                time.gmtime(float(view.created_at))))
    return " · ".join(parts)


def _footer(view: StudyView) -> str:
    kept = (f"trial {view.kept_trial} was kept on the canary" if view.kept_trial is not None
            else "the canary was restored to the baseline")
    run = f"; MLflow parent run {view.parent_run_id}" if view.parent_run_id else ""
    return f"At the end {kept}. Optuna storage {view.storage}{run}."


# HTML --------------------------------------------------------------------------------------
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
margin:0;background:#f4f5f7;color:#1d232a}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px}
.meta{color:#58606b;font-size:14px}
.hero{background:#fff;border-radius:10px;padding:18px 22px;margin:18px 0;
box-shadow:0 1px 3px rgba(0,0,0,.08)}
.hero p{font-size:18px;margin:0 0 12px;font-weight:600}
.cards{display:flex;gap:14px;flex-wrap:wrap}
.card{flex:1 1 160px;background:#f8f9fb;border-radius:8px;padding:10px 14px}
.card .k{font-size:12px;color:#58606b;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:700}.card .d{font-size:14px}
.badges span{display:inline-block;border-radius:12px;padding:2px 10px;margin:0 6px 0 0;
font-size:13px;color:#fff}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0 10px;
box-shadow:0 1px 2px rgba(0,0,0,.06)}
details summary{cursor:pointer;color:#58606b;font-size:13.5px;margin:4px 0}
th,td{padding:5px 10px;border-bottom:1px solid #e5e7eb;text-align:right}
th{background:#eef0f3;font-weight:600}td:first-child,th:first-child{text-align:left}
td.why{text-align:left;max-width:520px;color:#3b424b}
.l2 td:nth-child(2),.l2 th:nth-child(2){text-align:left}
.good{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}
.info,.same{color:#58606b}tr.changed td{font-weight:700}
tr.changed td:first-child::after{content:" ●";color:#1f77b4}
figure{background:#fff;margin:10px 0 18px;padding:12px;border-radius:10px;
box-shadow:0 1px 3px rgba(0,0,0,.08)}
figure img{max-width:100%;display:block;margin:0 auto}
figcaption{font-size:13.5px;color:#3b424b;margin:0 0 8px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px;align-items:start}
footer{color:#58606b;font-size:13px;margin-top:28px}
"""


def _h(s: object) -> str:
    return html.escape(str(s))


def _html_table(head: list[str], rows: list[list[str]], cls_col: int | None = None,
                why_col: int | None = None, changed_col: int | None = None,
                left2: bool = False) -> str:
    if not rows:
        return "<p class=meta>none</p>"
    width = len(head)
    cls = " class=l2" if left2 else ""
    out = [f"<div class=scroll><table{cls}><tr>"
           + "".join(f"<th>{_h(c)}</th>" for c in head) + "</tr>"]
    for r in rows:
        tr = "<tr class=changed>" if changed_col is not None and r[changed_col] else "<tr>"
        cells = []
        for i, c in enumerate(r[:width]):
            attr = ""
            if cls_col is not None and i == width - 1:
                attr = f" class={r[cls_col]}"
            if why_col is not None and i == why_col:
                attr = " class=why"
            cells.append(f"<td{attr}>{_h(c)}</td>")
        out.append(tr + "".join(cells) + "</tr>")
    return "".join(out) + "</table></div>"


def _cards(view: StudyView) -> str:
    b = view.baseline.metrics if view.baseline else {}
    w = view.best.metrics if view.best else {}
    cards = []
    for key, label, up in (("score", "score in the search", True),
                           ("busbw_norm", "bus bandwidth", True),
                           ("p99_us", "probe p99", False),
                           ("pause_us_per_s", "PFC pause", False)):
        bv, wv = b.get(key), w.get(key)
        if wv is None:
            continue
        text, cls = score_change(wv) if key == "score" else change(bv, wv, up)
        val = f"{100 * wv:.1f} % of line" if key == "busbw_norm" else (
            f"{wv:,.0f} µs" if key == "p99_us" else (
                f"{wv:,.0f} µs/s" if key == "pause_us_per_s" else f"{wv:.4f}"))
        cards.append(f"<div class=card><div class=k>{_h(label)}</div><div class=v>{_h(val)}"
                     f"</div><div class='d {cls}'>{_h(text)} vs baseline</div></div>")
    return "<div class=cards>" + "".join(cards) + "</div>"


def render_html(view: StudyView, images: dict[str, bytes]) -> str:
    """One self-contained page; ``images`` maps plot name -> PNG bytes (inlined as base64)."""
    counts = view.counts()
    badges = "".join(f"<span style='background:{m.colour}'>{_h(k.replace('_', ' '))} "
                     f"{counts[k]}</span>" for k, m in VERDICT_MARKS.items() if k in counts)

    def fig(name: str) -> str:
        spec = next(p for p in PLOTS if p[0] == name)
        if name not in images:
            return ""
        data = base64.b64encode(images[name]).decode("ascii")
        return (f"<figure><figcaption><b>{_h(spec[1])}.</b> {_h(spec[2])}</figcaption>"
                f"<img alt='{_h(spec[1])}' src='data:image/png;base64,{data}'></figure>")

    settings = settings_rows(view)
    changed = [r for r in settings if r[4]]
    same = [r for r in settings if not r[4]]
    cols = ["knob", "unit", "baseline", "recommended"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>ecntune study {_h(view.name)}</title>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>ecntune study <code>{_h(view.name)}</code></h1>",
        f"<div class=meta>{_h(_meta_line(view))}</div>",
        f"<section class=hero><p>{_h(headline_sentence(view))}</p>{_cards(view)}"
        f"<div class=badges style='margin-top:12px'>{badges}</div></section>",
        "".join(f"<p class=meta>{_h(x)}</p>" for x in view.findings),
        fig("convergence"),
        "<div class=grid><div><h2>Baseline vs best</h2>",
        _html_table(["metric", "baseline", "best", "change"], headline_rows(view), cls_col=4),
        f"</div><div><h2>{_h(settings_title(view))}</h2>",
        f"<p class=meta>{len(changed)} knobs changed. <code>ecntune export {_h(view.name)}"
        "</code> prints the commands.</p>",
        _html_table(cols, changed, changed_col=4),
        f"<details><summary>{len(same)} knobs unchanged</summary>"
        f"{_html_table(cols, same)}</details>" if same else "",
        "</div></div>",
        fig("best_vs_baseline"), fig("pareto"), fig("importance"), fig("knob_slices"),
        "<h2>Best trials</h2>", _html_table(*best_rows(view)),
        "<h2>Trials not kept: why</h2>",
        _html_table(*verdict_summary(view), why_col=2),
        _html_table(*verdict_rows(view), why_col=2, left2=True),
    ]
    if view.pareto:
        parts.append("<h2>Pareto front (busbw ↑, p99 ↓)</h2><p>" + _h(
            ", ".join(f"trial {t.number}" for t in view.pareto)) + "</p>")
    parts += [f"<footer>{_h(_footer(view))} Generated by ecntune report.</footer>",
              "</main></body></html>"]
    return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    images: dict[str, Path]


def write_report(view: StudyView, out_dir: str | Path,
                 progress: Callable[[int, int], None] | None = None) -> ReportFiles:
    """``report.html`` (self-contained), ``report.md`` and ``img/*.png`` in ``out_dir``;
    ``progress(done, total)`` is called after each plot."""
    out = Path(out_dir)
    pngs = render_plots(view, out / "img", progress)
    page = render_html(view, {k: p.read_bytes() for k, p in pngs.items()})
    h = write_file(out / "report.html", page)
    md = write_file(out / "report.md", markdown(view, {k: f"img/{p.name}"
                                                        for k, p in pngs.items()}))
    return ReportFiles(html=h, markdown=md, images=pngs)
