"""Mutated real outputs either parse or raise ParseError: never KeyError, IndexError, ...

Deterministic (seeded) mutations of every case input: cut at a random point, drop, duplicate or
swap lines, replace a token with junk. A parser that crashes with anything other than
ParseError on such input would turn a bad tool run into an internal error (exit code 1).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from parser_refs import CASES

from objectives import parsers as P
from tuner.errors import ParseError

JUNK = ["x", "N/A", "-", "1,2", "", "#", ":", "0x1f", "1e+99", "[1,0]<stdout>:", "\t", "é"]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    kind = rng.randrange(6)
    i = rng.randrange(len(lines))
    if kind == 0:
        return text[: rng.randrange(len(text) + 1)]
    if kind == 1:
        del lines[i]
    elif kind == 2:
        lines.insert(i, lines[i])
    elif kind == 3:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        tokens = lines[i].split(" ")
        k = rng.randrange(len(tokens))
        tokens[k] = rng.choice(JUNK)
        lines[i] = " ".join(tokens)
    return "\n".join(lines)


@pytest.mark.parametrize(
    "case", sorted(p.parent for p in CASES.glob("*/*/input.txt")), ids=lambda p: p.name
)
def test_mutations_raise_only_parse_error(case: Path) -> None:
    parser = getattr(P, f"parse_{case.parent.name}")
    text = (case / "input.txt").read_text(encoding="utf-8")
    rng = random.Random(case.name)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(60):
        mutated = mutate(text, rng)
        try:
            parser(mutated)
            outcomes["ok"] += 1
        except ParseError as exc:
            assert "line " in str(exc), str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, f"no mutation of {case.name} was refused"
