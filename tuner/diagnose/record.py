"""The findings a study ran under: stored with the study (``tuner.study_store.Info.findings``),
shown by ``show`` and the report. ``run`` records them after its preflight diagnosis."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tuner.diagnose.finding import Finding


def stored(raw_findings: list[dict[str, Any]] | None) -> list[Finding]:
    """The findings recorded with a study (none for a study from before #23)."""
    out = []
    for raw in raw_findings or []:
        try:
            out.append(Finding.model_validate(raw))
        except ValidationError:  # a hand-edited or future record: skip it, never crash a view
            continue
    return out


def line(f: Finding) -> str:
    """One finding as one line: layer, check, where, dominant mark, evidence, action."""
    mark = " [dominant: tuning would paper over it]" if f.dominant else ""
    return (f"{f.layer}/{f.check} on {f.where}{mark}: {f.evidence} -- likely cause: {f.cause}"
            f" -- action: {f.action}")


def lines(raw_findings: list[dict[str, Any]] | None, accepted: bool) -> list[str]:
    """``show``/report lines: one per finding, or one saying there were none; nothing for a
    study that recorded no diagnosis (``None``)."""
    if raw_findings is None:
        return []
    found = stored(raw_findings)
    if not found:
        return ["findings the study ran under: none (the fabric checks found nothing)"]
    head = f"findings the study ran under: {len(found)}"
    if accepted:
        head += " (run with --accept-findings)"
    return [head] + [f"- {line(f)}" for f in found]
