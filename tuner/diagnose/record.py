"""The findings a study ran under: stored with the study (an Optuna study attribute), shown by
``show`` and the report. ``run`` records them after its preflight diagnosis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tuner.diagnose.finding import Finding

ATTR = "findings"  # study user attribute: list of Finding dicts
ACCEPTED_ATTR = "findings_accepted"  # True when run went ahead with --accept-findings


def stored(user_attrs: Mapping[str, Any]) -> list[Finding]:
    """The findings recorded with a study (none for a study from before #23)."""
    out = []
    for raw in user_attrs.get(ATTR) or []:
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


def lines(user_attrs: Mapping[str, Any]) -> list[str]:
    """``show``/report lines: one per finding, or one saying there were none."""
    found = stored(user_attrs)
    if ATTR not in user_attrs:
        return []
    if not found:
        return ["findings the study ran under: none (the fabric checks found nothing)"]
    head = f"findings the study ran under: {len(found)}"
    if user_attrs.get(ACCEPTED_ATTR):
        head += " (run with --accept-findings)"
    return [head] + [f"- {line(f)}" for f in found]
