"""Pictures of a study and of one trial (matplotlib, Agg backend, imported lazily).

Study plots take the trials as ``tuner.study.TrialOutcome`` rows (what Optuna's user attrs or an
MLflow trial run hold), so the same code draws from either store. The two Optuna-native plots
(parameter importance, parallel coordinates) go through ``tuner.optuna_io.plot`` because only
that module may import Optuna. Every function returns a matplotlib ``Figure``; ``save`` writes a
PNG. Every verdict kind has one colour and marker everywhere (``VERDICT_MARKS``; the report's
badges too): ok = blue, baseline = black, rolled back = red, rejected before applying = grey,
screened out by the twin = cyan, measured but infeasible = purple, stopped early = brown,
failed = orange.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from objectives.measurement import Measurement
    from tuner.study import Confirmation, TrialOutcome

OK, BASE, ROLLED, REJECTED, FAILED = "#1f77b4", "#111111", "#d62728", "#8c8c8c", "#ff7f0e"


@dataclass(frozen=True)
class Mark:
    colour: str
    marker: str
    size: int
    label: str


# One entry per verdict kind (``kind``), in legend order.
VERDICT_MARKS: dict[str, Mark] = {
    "ok": Mark(OK, "o", 36, "ok"),
    "baseline": Mark(BASE, "*", 160, "baseline (trial 0)"),
    "rolled_back": Mark(ROLLED, "X", 70, "rolled back"),
    "infeasible": Mark("#9467bd", "P", 60, "infeasible (measured; broke a guardrail)"),
    "pruned": Mark("#8c564b", "D", 40, "stopped early"),
    "rejected": Mark(REJECTED, "v", 44, "rejected by safety limits (not applied)"),
    "screened": Mark("#17becf", "^", 44, "screened out by the twin (not applied)"),
    "failed": Mark(FAILED, "s", 44, "failed"),
    "other": Mark(FAILED, "d", 44, "interrupted/other"),
}
# The study's per-kind trial counts (MLflow parent-run metrics): every kind but the baseline
# and interrupted ones (not counted against the budget).
TRIAL_COUNTS = tuple(f"trials_{k}" for k in VERDICT_MARKS if k not in ("baseline", "other"))

DPI = 110

# Metrics of the best-vs-baseline panel: (metric key, label, higher is better; None = neither:
# ECN marks and CNPs are the mechanism at work, more of them is not a fault).
COMPARE_METRICS: tuple[tuple[str, str, bool | None], ...] = (
    ("busbw_norm", "busbw / line rate", True),
    ("p50_us", "probe p50", False),
    ("p99_us", "probe p99", False),
    ("p999_us", "probe p99.9", False),
    ("pause_us_per_s", "PFC pause time", False),
    ("ecn_marked_pkts", "ECN marks", None),
    ("cnp_sent", "CNPs sent", None),
    ("lossless_drops", "lossless drops", False),
)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _style() -> Any:
    """A clean style context (Optuna's plots switch the global style to ggplot)."""
    plt = _plt()
    return plt.style.context(["default", {"axes.grid": True, "grid.alpha": 0.3,
                                          "axes.spines.top": False,
                                          "axes.spines.right": False,
                                          "font.size": 10, "axes.titlesize": 12,
                                          "axes.titleweight": "bold"}])


def save(fig: Figure, path: str | Path, tight: bool = False) -> Path:
    """Write ``fig`` as PNG and free it (``tight=True`` crops to the drawn content at the
    cost of a second layout pass; the figures here lay themselves out)."""
    plt = _plt()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=DPI, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return p


def kind(verdict: str) -> str:
    """``ok``, ``baseline``, ``rolled_back``, ``rejected``, ``infeasible``, ``pruned``,
    ``screened``, ``failed`` or ``other``."""
    head = verdict.split(":")[0]
    return head if head in ("ok", "baseline", "rolled_back", "rejected", "infeasible", "pruned",
                            "screened", "failed") else "other"


def best_so_far(trials: Sequence[TrialOutcome]) -> list[tuple[int, float]]:
    """(trial number, best score so far) after each ok/baseline trial with a score."""
    out: list[tuple[int, float]] = []
    best = -math.inf
    for t in sorted(trials, key=lambda t: t.number):
        if kind(t.verdict) in ("ok", "baseline") and t.score is not None:
            best = max(best, t.score)
            out.append((t.number, best))
    return out


def pareto_front(points: Iterable[tuple[int, float, float]]) -> list[int]:
    """Trial numbers not dominated in (busbw up, p99 down), sorted by busbw."""
    pts = sorted(points, key=lambda p: (-p[1], p[2]))
    front: list[int] = []
    best_p99 = math.inf
    for number, _bw, p99 in pts:
        if p99 < best_p99:
            front.append(number)
            best_p99 = p99
    return front


# Study plots -------------------------------------------------------------------------------
def convergence(trials: Sequence[TrialOutcome], title: str = "") -> Figure:
    """Score per trial and best so far; every verdict kind marked (``VERDICT_MARKS``)."""
    plt = _plt()
    with _style():
        fig, ax = plt.subplots(figsize=(9, 4.2))
        scored = [t.score for t in trials if t.score is not None]
        floor = min(scored) if scored else 0.0
        span = (max(scored) - floor) if len(scored) > 1 else 1.0
        bottom = floor - 0.08 * (span or 1.0)
        groups: dict[str, list[tuple[int, float]]] = {}
        for t in trials:
            k = kind(t.verdict)
            y = t.score if t.score is not None else bottom
            groups.setdefault(k, []).append((t.number, y))
        for k, m in VERDICT_MARKS.items():
            if k in groups:
                xs, ys = zip(*groups[k], strict=True)
                ax.scatter(xs, ys, c=m.colour, marker=m.marker, s=m.size, zorder=3,
                           label=f"{m.label} ({len(xs)})")
        bsf = best_so_far(trials)
        if bsf:
            xs, ys = zip(*bsf, strict=True)
            last = max(t.number for t in trials)
            ax.step([*xs, last], [*ys, ys[-1]], where="post", c="#2ca02c", lw=2,
                    label="best so far", zorder=2)
            best_n, best_y = max(bsf, key=lambda p: p[1])
            best_n = next(n for n, y in bsf if y == best_y)
            ax.annotate(f"best: trial {best_n}\nscore {best_y:.3f}", (best_n, best_y),
                        xytext=(10, -28), textcoords="offset points", fontsize=9,
                        arrowprops=dict(arrowstyle="->", color="#2ca02c"))
        base = next((t for t in trials if kind(t.verdict) == "baseline"), None)
        if base is not None and base.score is not None:
            ax.axhline(base.score, ls="--", c=BASE, lw=1, alpha=0.6)
        if any(t.score is None for t in trials):
            ax.axhline(bottom, c=REJECTED, lw=0.6, alpha=0.5, ls=":",
                       label="bottom line: no score (not applied / aborted)")
        ax.set_xlabel("trial")
        ax.set_ylabel("score (higher is better)")
        ax.set_title(title or "Convergence: score per trial")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
        fig.tight_layout()
    return fig


def pareto(trials: Sequence[TrialOutcome], title: str = "") -> Figure:
    """busbw vs probe p99, coloured by PFC pause time; the non-dominated trials joined."""
    plt = _plt()
    with _style():
        fig, ax = plt.subplots(figsize=(8, 4.8))
        ok = [t for t in trials if kind(t.verdict) in ("ok", "baseline")
              and "busbw_norm" in t.metrics and "p99_us" in t.metrics]
        bad = [t for t in trials if kind(t.verdict) == "rolled_back"
               and "busbw_norm" in t.metrics and "p99_us" in t.metrics]
        if not ok:
            ax.text(0.5, 0.5, "no measured trial has both busbw and p99", ha="center",
                    transform=ax.transAxes)
            return fig
        x = [100 * t.metrics["busbw_norm"] for t in ok]
        y = [t.metrics["p99_us"] for t in ok]
        c = [t.metrics.get("pause_us_per_s", 0.0) for t in ok]
        sc = ax.scatter(x, y, c=c, cmap="plasma", s=60, edgecolors="k", linewidths=0.4,
                        zorder=3, vmin=0)
        cb = fig.colorbar(sc, ax=ax, pad=0.02)
        cb.set_label("PFC pause time (µs per s per port)")
        if bad:
            ax.scatter([100 * t.metrics["busbw_norm"] for t in bad],
                       [t.metrics["p99_us"] for t in bad], marker="x", c=ROLLED, s=50,
                       zorder=3, label=f"rolled back ({len(bad)})")
        front = pareto_front((t.number, 100 * t.metrics["busbw_norm"], t.metrics["p99_us"])
                             for t in ok)
        by_n = {t.number: t for t in ok}
        fx = [100 * by_n[n].metrics["busbw_norm"] for n in front]
        fy = [by_n[n].metrics["p99_us"] for n in front]
        ax.plot(fx, fy, c="#2ca02c", lw=1.5, zorder=2, label="Pareto front")
        for n in front:
            t = by_n[n]
            ax.annotate(str(n), (100 * t.metrics["busbw_norm"], t.metrics["p99_us"]),
                        xytext=(5, 4), textcoords="offset points", fontsize=8)
        base = next((t for t in ok if kind(t.verdict) == "baseline"), None)
        if base is not None:
            ax.scatter([100 * base.metrics["busbw_norm"]], [base.metrics["p99_us"]],
                       marker="*", s=260, facecolors="none", edgecolors=BASE, lw=1.5,
                       zorder=4, label="baseline")
        ally = y + [t.metrics["p99_us"] for t in bad]
        if max(ally) / max(min(ally), 1e-9) > 20:
            ax.set_yscale("log")
        ax.set_xlabel("bus bandwidth, % of NIC line rate (higher is better) →")
        ax.set_ylabel("probe p99 latency, µs (lower is better) ↓")
        ax.set_title(title or "Trade-off: bandwidth vs tail latency vs PFC")
        ax.legend(loc="best", fontsize=9)
        fig.tight_layout()
    return fig


def best_vs_baseline(base: TrialOutcome, best: TrialOutcome,
                     base_m: Measurement | None = None,
                     best_m: Measurement | None = None,
                     confirm: Confirmation | None = None) -> Figure:
    """Best trial against the baseline, left to right: the paired busbw changes of the
    confirmation repeats (``confirm``, see ``tuner.study``), busbw of every iteration of each
    collective (both are the repeat spread), and the change of the headline metrics, green
    where better. Panels without data are left out."""
    plt = _plt()
    with _style():
        have_conf = bool(confirm and confirm.candidates)
        have_iters = bool(base_m and best_m and base_m.collectives and best_m.collectives)
        n = 1 + have_conf + have_iters
        fig, axes = plt.subplots(1, n, figsize=(5.2 * n + 1.2, 4.4), squeeze=False,
                                 gridspec_kw={"width_ratios": [1.0] * (n - 1) + [1.4]})
        ax_bar = axes[0][-1]
        if have_conf:
            assert confirm is not None
            _confirmation(axes[0][0], confirm)
        if have_iters:
            assert base_m is not None and best_m is not None
            _iteration_spread(axes[0][n - 2], base_m, best_m, best.number)
        labels, pct, colors, texts = [], [], [], []
        for key, label, up in COMPARE_METRICS:
            b, w = base.metrics.get(key), best.metrics.get(key)
            if b is None or w is None:
                continue
            if b == 0 and w == 0:
                p = 0.0
            elif b == 0:
                p = 100.0
            else:
                p = (w - b) / abs(b) * 100
            p = 0.0 if abs(p) < 0.5 else p  # "-0 %" reads as a change
            better = p == 0 or ((p > 0) == up)
            labels.append(label if up is not None else f"{label} (info)")
            pct.append(max(min(p, 200.0), -100.0))
            colors.append(REJECTED if up is None else "#2ca02c" if better else ROLLED)
            texts.append(f"{_short(b)} → {_short(w)}")
        ys = range(len(labels))
        ax_bar.barh(list(ys), pct, color=colors)
        ax_bar.axvline(0, c="k", lw=0.8)
        ax_bar.set_yticks(list(ys), labels)
        ax_bar.invert_yaxis()
        for y, p, t in zip(ys, pct, texts, strict=True):  # labels right of the bar or of 0
            ax_bar.text(max(p, 0.0), y, f" {p:+.0f} %  ({t})", va="center", ha="left",
                        fontsize=8)
        ax_bar.set_xlim(min(min(pct + [0.0]) * 1.1, -10.0),
                        max(pct + [0.0]) + 100.0)  # room for the labels on the right
        ax_bar.set_xlabel("change vs baseline, % (green = better, red = worse, grey = info)")
        ax_bar.set_title(f"Best (trial {best.number}) vs baseline")
        fig.tight_layout()
    return fig


def _confirmation(ax: Any, conf: Confirmation) -> None:
    """Each candidate's paired change of the primary metric (one dot per fresh placement) and
    the corrected 95 % interval of its mean; a winner's interval lies above 0 (or it meets a
    guardrail the baseline breaks, at the price shown)."""
    import math

    from objectives.score import log2_percent

    for x, c in enumerate(conf.candidates):
        col = OK if c.confirmed else ROLLED if c.problem else BASE
        pts = [log2_percent(d) for d in c.diffs]
        ax.scatter([x] * len(pts), pts, c=col, s=22, alpha=0.6, zorder=3)
        if math.isfinite(c.ci95_high):
            ax.errorbar([x + 0.2], [c.improvement_percent],
                        yerr=[[c.improvement_percent - c.ci95_low],
                              [c.ci95_high - c.improvement_percent]],
                        fmt="D", color=col, capsize=4, zorder=4)
        ax.text(x + 0.28, c.improvement_percent, f" {c.improvement_percent:+.1f} %",
                va="center", fontsize=8)
    ax.axhline(0, c="k", lw=0.8)
    ax.set_xticks(range(len(conf.candidates)),
                  [f"#{c.trial}{'' if c.confirmed else ' ✗'}" for c in conf.candidates])
    primary = conf.candidates[0].primary if conf.candidates else "busbw"
    ax.set_ylabel(f"paired {'busbw' if primary == 'busbw' else 'p99 (lower)'} change, %")
    win = conf.winner
    ax.set_title(f"Winner #{win}, {conf.paired_repeats} paired repeats" if win is not None
                 else f"Nothing confirmed over {conf.paired_repeats} paired repeats")


def drift(rows: list[dict[str, Any]]) -> Figure:
    """The baseline's paired score at each re-measurement during the study."""
    plt = _plt()
    with _style():
        fig, ax = plt.subplots(figsize=(7.5, 3.2))
        xs = [r["after_trial"] for r in rows]
        ax.plot(xs, [r["score"] for r in rows], "o-", color=BASE)
        ax.axhline(0, c="k", lw=0.8)
        ax.set_xlabel("after trial")
        ax.set_ylabel("baseline paired score")
        ax.set_title("Baseline drift (0 = the baseline measures as at the start)")
        fig.tight_layout()
    return fig


def _iteration_spread(ax: Any, base_m: Measurement, best_m: Measurement, best_n: int) -> None:
    """busbw of every iteration, baseline and best side by side per collective."""
    data, labels, colours = [], [], []
    for cb in base_m.collectives:
        cw = next((c for c in best_m.collectives
                   if c.name == cb.name and c.size_bytes == cb.size_bytes), None)
        if cw is None:
            continue
        for c, who, col in ((cb, "base", BASE), (cw, f"#{best_n}", OK)):
            data.append(iteration_busbw(c))
            labels.append(f"{c.name}\n{_size(c.size_bytes)}\n{who}")
            colours.append(col)
    bp = ax.boxplot(data, patch_artist=True, widths=0.6)
    for patch, col in zip(bp["boxes"], colours, strict=True):
        patch.set(facecolor=col, alpha=0.35, edgecolor=col)
    for i, (vals, col) in enumerate(zip(data, colours, strict=True), start=1):
        ax.scatter([i] * len(vals), vals, c=col, s=14, zorder=3)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_ylabel("busbw per iteration (GB/s)")
    ax.set_title("Repeat-to-repeat spread")


def iteration_busbw(c: Any) -> list[float]:
    """busbw of each iteration: the mean busbw scaled by mean time / iteration time."""
    times = [t for t in c.iteration_times_us if t > 0]
    if not times:
        return [c.busbw_gbytes_per_s]
    mean = sum(times) / len(times)
    return [c.busbw_gbytes_per_s * mean / t for t in times]


def _size(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def _short(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def importance(study: Any) -> Figure | None:
    """Optuna's fANOVA parameter importance for the scalar score (its own matplotlib plot);
    None while fewer than three trials have a score (importance is undefined then)."""
    from tuner import optuna_io, study_store

    scored = [t for t in optuna_io.trials(study)
              if t.state.name == "COMPLETE" and study_store.tags(t).score is not None]
    if len(scored) < 3:
        return None
    _plt()
    ax = optuna_io.plot(study, "param_importances",
                        target=lambda t: _score_or_nan(study_store.tags(t).score),
                        target_name="score")
    ax.set_title("")
    ax.set_title("Which knob mattered: share of the score's variance (fANOVA)", loc="left",
                 fontsize=12, fontweight="bold")
    ax.set_ylabel("searched knob")
    ax.set_xlabel("importance for the score (sums to 1)")
    legend = ax.get_legend()
    if legend is not None:
        legend.remove()
    fig = ax.figure
    fig.set_size_inches(9, 0.45 * len(ax.get_yticks()) + 1.6)
    fig.tight_layout()
    return fig


def knob_slices(trials: Sequence[TrialOutcome], baseline: dict[str, int] | None = None,
                cols: int = 4) -> Figure:
    """Score against each knob the study varied, one panel per knob. Unlike Optuna's slice
    plot it also shows rolled-back (red) and rejected (grey, bottom) trials, which is where an
    engineer learns which region of a knob is unsafe."""
    from tuner.settings import KNOBS

    plt = _plt()
    names = [k for k in KNOBS if len({t.values.get(k) for t in trials if k in t.values}) > 1]
    scored = [t.score for t in trials if t.score is not None]
    lo = min(scored) if scored else 0.0
    hi = max(scored) if scored else 1.0
    bottom = lo - 0.08 * ((hi - lo) or 1.0)
    with _style():
        rows = max(1, math.ceil(len(names) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(3.1 * cols, 2.6 * rows), sharey=True,
                                 squeeze=False)
        flat = [a for row in axes for a in row]
        for ax, name in zip(flat, names, strict=False):
            groups: dict[str, tuple[list[float], list[float]]] = {}
            for t in trials:
                if name in t.values:
                    xs, ys = groups.setdefault(kind(t.verdict), ([], []))
                    xs.append(t.values[name])
                    ys.append(t.score if t.score is not None else bottom)
            for k, (xs, ys) in groups.items():
                m = VERDICT_MARKS[k]
                ax.scatter(xs, ys, c=m.colour, marker=m.marker, s=0.7 * m.size, zorder=3)
            vals = [t.values[name] for t in trials if t.values.get(name, 0) > 0]
            if vals and max(vals) / min(vals) > 30:
                ax.set_xscale("log")
            unit = KNOBS[name].unit
            ax.set_xlabel(f"{name} ({unit})", fontsize=9)
            ax.tick_params(labelsize=8)
        for ax in flat[len(names):]:
            ax.set_visible(False)
        for row in axes:
            row[0].set_ylabel("score")
        fig.suptitle("Score by knob value (star baseline, blue ok, red rolled back, purple "
                     "infeasible, grey rejected, cyan screened)", fontsize=12, fontweight="bold")
        fig.tight_layout()
    return fig


# One trial ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timeseries:
    """Busiest port of one simulated measurement: time, queue, paused flag, sending rate."""

    port: str
    t_us: list[float]
    queue_bytes: list[float]
    paused: list[int]
    rate_gbps: list[float]

    @classmethod
    def from_raw(cls, raw: dict[str, str]) -> Timeseries | None:
        """Read ``raw["rocesim_timeseries"]`` (JSON) of a sim measurement, if there is one."""
        text = raw.get("rocesim_timeseries")
        if not text:
            return None
        d = json.loads(text)
        return cls(port=str(d.get("port", "")), t_us=list(d["t_us"]),
                   queue_bytes=list(d["queue_bytes"]), paused=list(d["paused"]),
                   rate_gbps=list(d.get("rate_gbps", d.get("rate", []))))


def timeseries(ts: Timeseries, kmin_bytes: int | None = None,
               kmax_bytes: int | None = None, title: str = "") -> Figure:
    """Queue depth (with the ECN thresholds), PFC-paused intervals and rate, busiest port."""
    plt = _plt()
    with _style():
        fig, (ax_q, ax_r) = plt.subplots(2, 1, figsize=(9, 4.6), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 2]})
        t = [x / 1000.0 for x in ts.t_us]
        q = [x / 1024.0 for x in ts.queue_bytes]
        ax_q.plot(t, q, c=OK, lw=1.2, label="queue depth")
        for val, name, col in ((kmin_bytes, "Kmin", "#2ca02c"), (kmax_bytes, "Kmax", ROLLED)):
            if val is not None and val / 1024.0 <= max(q + [1.0]) * 1.5:
                ax_q.axhline(val / 1024.0, ls="--", c=col, lw=1, label=f"{name} {val:,} B")
        _shade_paused(ax_q, t, ts.paused)
        _shade_paused(ax_r, t, ts.paused)
        ax_q.set_ylabel("queue (KiB)")
        ax_q.legend(loc="upper right", fontsize=8)
        ax_q.set_title(title or f"Busiest port {ts.port}: queue, PFC pauses and rate")
        if ts.rate_gbps:
            ax_r.plot(t[: len(ts.rate_gbps)], ts.rate_gbps, c="#9467bd", lw=1.2)
        ax_r.set_ylabel("mean flow rate\n(Gbit/s)")
        ax_r.set_xlabel("simulated time (ms); red bands = PFC paused")
        fig.subplots_adjust(left=0.09, right=0.98, top=0.92, bottom=0.12, hspace=0.08)
    return fig


def _shade_paused(ax: Any, t: list[float], paused: list[int]) -> None:
    start = None
    for i, p in enumerate(paused + [0]):
        if p and start is None:
            start = i
        elif not p and start is not None:
            end = t[i] if i < len(t) else t[-1]
            ax.axvspan(t[start], end, color=ROLLED, alpha=0.15, lw=0)
            start = None


def _score_or_nan(s: float | None) -> float:
    return float("nan") if s is None else float(s)


def settings_diff(values: dict[str, int], baseline: dict[str, int]) -> list[dict[str, Any]]:
    """One row per knob the trial set: unit, baseline, trial value, whether it changed."""
    from tuner.settings import KNOBS

    rows = []
    for name in KNOBS:
        if name not in values:
            continue
        b, v = baseline.get(name), values[name]
        rows.append({"knob": name, "unit": KNOBS[name].unit, "baseline": b, "trial": v,
                     "changed": b != v,
                     "ratio": round(v / b, 4) if b not in (None, 0) else None})
    return rows


def write_trial_files(out_dir: str | Path, values: dict[str, int], baseline: dict[str, int],
                      m: Measurement | None) -> Path:
    """A nested run's artifacts, written to ``out_dir``: ``settings_diff.json``, every raw
    tool output under ``raw/``, ``counters_before.json``/``counters_after.json``/
    ``counters_delta.json`` and, for the simulated backend, ``timeseries.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "settings_diff.json").write_text(
        json.dumps(settings_diff(values, baseline), indent=1), encoding="utf-8")
    if m is None:
        return out
    raw = out / "raw"
    raw.mkdir(exist_ok=True)
    for name, text in m.raw.items():
        ext = ".json" if text.lstrip().startswith(("{", "[")) else ".txt"
        (raw / f"{_safe(name)}{ext}").write_text(text, encoding="utf-8")
    for name, c in (("counters_before", m.counters_before), ("counters_after", m.counters_after),
                    ("counters_delta", m.counters)):
        (out / f"{name}.json").write_text(c.model_dump_json(indent=1), encoding="utf-8")
    ts = Timeseries.from_raw(m.raw)
    if ts is not None and ts.t_us:
        save(timeseries(ts, values.get("kmin_bytes"), values.get("kmax_bytes")),
             out / "timeseries.png", tight=False)
    return out


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
