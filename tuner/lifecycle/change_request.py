"""The change request a change-advisory board asks for, as Markdown and as HTML.

One document model (headings, paragraphs, tables, code blocks) rendered twice, so the two files
never disagree. Content: the winning settings per platform next to what runs today, the evidence
(the paired busbw change with its confidence interval, and every trade; PFC pause time, tail
latency and bus bandwidth before and after), the exact commands per platform (``ecntune
export``'s generators), how they are made to survive a reboot, the rollback commands (the same
generators, back to today's values) and how to verify afterwards.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from objectives.verdict import CandidateCheck
from safety.files import write_file
from tuner.settings import KNOBS, SWITCH_KNOBS


@dataclass(frozen=True)
class Table:
    head: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Code:
    lines: list[str]


@dataclass(frozen=True)
class Heading:
    text: str


Block = Heading | str | Table | Code  # a plain str is a paragraph


class Evidence(BaseModel):
    """What the confirmation measured: paired repeats of baseline and winner."""

    model_config = ConfigDict(frozen=True)
    improvement_percent: float  # mean paired change of the primary metric
    ci_low_percent: float
    ci_high_percent: float
    confidence: float = 0.95
    pairs: int
    metric: str = "busbw"
    method: str = "paired repeats, Student-t interval"
    # before (today's settings) / after (winner), from the same confirmation repeats
    busbw_gbps: tuple[float | None, float | None] = (None, None)
    p99_us: tuple[float | None, float | None] = (None, None)
    pause_us_per_s: tuple[float | None, float | None] = (None, None)  # PFC, per port


class ChangeRequest(BaseModel):
    model_config = ConfigDict(frozen=True)
    study: str
    experiment: str
    description: str = ""
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(
        timespec="seconds"))
    values: dict[str, int]  # the winner
    baseline: dict[str, int]  # what runs today
    switches: list[str]
    nics: list[str]
    group: str = ""  # inventory group the promotion targets ("" = the canary)
    evidence: Evidence | None = None
    waves: str = "canary,10,50,100"
    persist_notes: list[str] = Field(default_factory=list)

    @property
    def changed(self) -> list[str]:
        return [k for k, v in self.values.items() if self.baseline.get(k) != v]


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "n/a" if x is None else format(x, fmt)


def blocks(cr: ChangeRequest) -> list[Block]:
    from tuner.cli.export import render

    where = f"inventory group `{cr.group}`" if cr.group else "the canary"
    about = f": {cr.description}" if cr.description else ""
    out: list[Block] = [
        f"Study `{cr.study}` (experiment `{cr.experiment}`{about}), created {cr.created_at}.",
        f"Change: {len(cr.changed)} congestion-control value(s) on {where}: "
        f"{len(cr.switches)} switch(es), {len(cr.nics)} NIC port(s). Rolled out in waves "
        f"`{cr.waves}` with safety monitors and a measurement gate after each wave; a "
        "violation rolls the wave back automatically.",
        Heading("Settings"),
        Table(["knob", "device", "unit", "today", "proposed"],
              [[k, KNOBS[k].device, KNOBS[k].unit, str(cr.baseline.get(k, "")), str(v)]
               for k, v in cr.values.items() if k in cr.changed]),
        Heading("Evidence"),
    ]
    ev = cr.evidence
    if ev is None:
        out.append("No confirmation repeats were recorded: the change is a single "
                   "measurement and is not evidence for a change.")
    else:
        out.append(f"Paired change of {ev.metric}: {ev.improvement_percent:+.1f} % "
                   f"({ev.confidence:.0%} interval {ev.ci_low_percent:+.1f} % to "
                   f"{ev.ci_high_percent:+.1f} %, {ev.pairs} pairs; {ev.method}).")
        out.append("Before/after (means over the confirmation's placements, baseline and "
                   "winner measured interleaved on each):")
        out.append(Table(["measure", "today", "proposed"], [
            ["bus bandwidth (GB/s)", _num(ev.busbw_gbps[0]), _num(ev.busbw_gbps[1])],
            ["probe p99 latency (us)", _num(ev.p99_us[0]), _num(ev.p99_us[1])],
            ["PFC pause (us per s per port)", _num(ev.pause_us_per_s[0]),
             _num(ev.pause_us_per_s[1])]]))
    apply = render(cr.values, cr.baseline, cr.switches, cr.nics)
    back = render(cr.baseline, cr.values, cr.switches, cr.nics, back_out=True)
    saves = ["# SONiC: config save -y", "# Cumulus: nv config save"] \
        if any(k in SWITCH_KNOBS for k in cr.changed) else []
    out += [Heading("Commands"),
            "Run per target in wave order (`ecntune promote STUDY --to GROUP --apply` runs "
            "exactly these, guarded; without `--apply` it prints them).",
            Code(apply.splitlines()),
            Heading("Persistence"),
            Code([*saves, "# hosts: boot unit ecntune-dcqcn-<netdev>.service re-applying the "
                  "values (or mlxconfig NVCONFIG)", *cr.persist_notes]),
            Heading("Rollback"),
            "Back to today's values (and `config save` / `nv config save` / remove the boot "
            "unit if they were persisted):",
            Code(back.splitlines()),
            Heading("Verification"),
            f"`ecntune verify {cr.group or 'GROUP'}` reads every target and lists any value "
            "that differs from what was promoted; exit 0 when all hold."]
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(cr: ChangeRequest) -> str:
    lines = [f"# Change request: ECN/DCQCN settings from study {cr.study}", ""]
    for b in blocks(cr):
        if isinstance(b, Heading):
            lines += [f"## {b.text}", ""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(b.head) + " |")
            lines.append("|" + "---|" * len(b.head))
            lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            lines.append("")
        elif isinstance(b, Code):
            lines += ["```sh", *b.lines, "```", ""]
        else:
            lines += [b, ""]
    return "\n".join(lines)


def _inline(text: str) -> str:
    """Escape, then `code` spans (the only inline markup the blocks use)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def to_html(cr: ChangeRequest) -> str:
    title = html.escape(f"Change request: ECN/DCQCN settings from study {cr.study}")
    body = [f"<h1>{title}</h1>"]
    for b in blocks(cr):
        if isinstance(b, Heading):
            body.append(f"<h2>{_inline(b.text)}</h2>")
        elif isinstance(b, Table):
            body.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>"
                                                       for h in b.head) + "</tr></thead><tbody>")
            body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                     for r in b.rows]
            body.append("</tbody></table>")
        elif isinstance(b, Code):
            body.append("<pre><code>" + html.escape("\n".join(b.lines)) + "</code></pre>")
        else:
            body.append(f"<p>{_inline(b)}</p>")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #999;padding:.2em .5em}"
             "pre{background:#f4f4f4;padding:.5em;overflow-x:auto}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _mean_busbw(metrics: dict[str, float]) -> float | None:
    vals = [v for k, v in metrics.items() if k.startswith("busbw_gbytes_per_s.")]
    return sum(vals) / len(vals) if vals else None


def _both(c: CandidateCheck, metric: str) -> tuple[float | None, float | None] | None:
    """(baseline, winner) means of one metric over the confirmation's placements."""
    e = c.effect(metric)
    return None if e is None else (e.baseline_mean, e.candidate_mean)


def from_study(target: str | None, storage: str | None = None, results: str | None = None,
               group: str = "") -> ChangeRequest:
    """A change request for a study's confirmed winner (read-only: the Optuna storage)."""
    from tuner.lifecycle.winner import load_winner

    win = load_winner(target, storage, results)
    c, base, best = win.check, win.baseline_metrics, win.winner_metrics
    ev = Evidence(
        improvement_percent=c.improvement_percent, ci_low_percent=c.ci95_low,
        ci_high_percent=c.ci95_high, pairs=len(c.diffs),
        metric="busbw" if c.primary == "busbw" else "probe p99 (lower is better)",
        method="baseline and winner re-measured interleaved on placements drawn for the "
               "study; Student-t interval of the mean paired log2 ratio, Bonferroni-corrected "
               "for the candidates confirmed together" + (f"; trade: {c.price}" if c.price
                                                          else ""),
        busbw_gbps=_both(c, "busbw") or (_mean_busbw(base), _mean_busbw(best)),
        p99_us=_both(c, "p99_us") or (base.get("p99_us"), best.get("p99_us")),
        pause_us_per_s=_both(c, "pause_us_per_s") or (base.get("pause_us_per_s"),
                                                      best.get("pause_us_per_s")))
    return ChangeRequest(study=win.study, experiment=win.experiment.name,
                         description=win.experiment.description, values=win.values,
                         baseline=win.baseline, switches=win.canary_switches,
                         nics=win.canary_nics, group=group, evidence=ev)


def write(cr: ChangeRequest, folder: Path) -> tuple[Path, Path]:
    """``change-request.md`` and ``change-request.html`` in ``folder``."""
    return (write_file(folder / "change-request.md", to_markdown(cr)),
            write_file(folder / "change-request.html", to_html(cr)))
