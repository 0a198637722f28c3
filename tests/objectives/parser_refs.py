"""Helpers for the parser tests: find shared/reference/, cut sections out of captured sessions."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"

# Derived descriptions (not tool output) that no parser is meant to read.
DERIVED_SUFFIXES = ("-from-source.txt", "-layout.txt", "-schema.txt")
DERIVED_NAMES = {"FORMAT-NOTES.md", "INDEX.md", "eos-random-detect-ecn-pfc-note.txt"}


def reference_dir() -> Path:
    """``<repo>/../shared/reference``, and only there; a missing copy fails the test: the
    parsers are tested on real samples or not at all."""
    path = REPO.parent / "shared" / "reference"
    if not (path / "INDEX.md").is_file():
        pytest.fail(f"reference samples not found at {path}: the parser tests expect shared/ "
                    "beside the repository (../shared/reference/INDEX.md)")
    return path


def sample_files(root: Path) -> list[Path]:
    """Every tool-output sample under ``root`` (derived descriptions excluded; the
    packet-level simulator runs are the twin's referee, judged by bench/fidelity.py)."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name not in DERIVED_NAMES and not p.name.endswith(DERIVED_SUFFIXES)
        and "packet-level" not in p.relative_to(root).parts
    )


def body(path: Path) -> str:
    """The sample without its ``# source: ...`` provenance line."""
    first, _, rest = path.read_text(encoding="utf-8").partition("\n")
    assert first.startswith("# source:"), path
    return rest


def is_truncated(path: Path) -> bool:
    """The provenance line says the public excerpt stopped early."""
    return "TRUNCATED" in path.read_text(encoding="utf-8").partition("\n")[0]


def between(text: str, start: str | None, end: str | None = None, *, nth: int = 0) -> str:
    """Lines after the ``nth`` line containing ``start`` (or from the top) up to ``end``."""
    lines = text.split("\n")
    i = 0
    if start is not None:
        hits = [k for k, ln in enumerate(lines) if start in ln]
        assert len(hits) > nth, f"{start!r} not found {nth + 1} times"
        i = hits[nth] + 1
    j = len(lines)
    if end is not None:
        for k in range(i, len(lines)):
            if end in lines[k]:
                j = k
                break
        else:
            raise AssertionError(f"{end!r} not found after {start!r}")
    return "\n".join(lines[i:j])
