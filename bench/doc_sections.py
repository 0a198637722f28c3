"""Sections of a doc that one bench script owns, between ``<!-- x:start -->`` markers.

Several scripts write one doc (docs/benchmarks.md, docs/reliability.md, docs/fidelity.md):
each replaces only its own section, and a script that regenerates a whole doc keeps the
sections others own.
"""

from __future__ import annotations

from pathlib import Path


def write_section(doc: Path, start: str, end: str, text: str) -> None:
    """``text`` as the section between ``start`` and ``end`` of ``doc`` (appended when the
    markers are missing); the rest of the doc is kept."""
    old = doc.read_text(encoding="utf-8")
    block = f"{start}\n{text}\n{end}"
    if start in old and end in old:
        new = old[:old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(new, encoding="utf-8")


def kept_section(doc: Path, start: str, end: str) -> str:
    """The section between the markers as it stands in ``doc`` (markers included, on lines of
    their own after a blank line), or "" when it has none: for a script rewriting ``doc``."""
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if start not in old or end not in old:
        return ""
    return "\n" + old[old.index(start):old.index(end) + len(end)] + "\n"
