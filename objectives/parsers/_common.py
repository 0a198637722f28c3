"""Shared helpers for the tool-output parsers: numbered lines, errors that quote, numbers.

Every parser reports a failure as :class:`tuner.errors.ParseError` whose message names the tool,
the 1-based line number and quotes the offending line, so an operator can find it in the raw
output that rides along with the measurement.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from tuner.errors import ParseError

FROZEN = ConfigDict(frozen=True, extra="forbid")

# A shell prompt followed by a command: `$ ls`, `user@host:~$ cmd`, `[root@cn3 ~]# cmd`,
# `root@sonic:~# show pfcwd config`, `~# ib_read_lat x`. Captured sessions carry these.
_PROMPT = re.compile(
    r"^\s*(?:\$(?:\s|$)|\[[^\]\s]+@[^\]]+\][$#](?:\s|$)|[\w.-]+@[\w.:~/-]*[$#](?:\s|$)"
    r"|~[\w/]*[$#]\s)"
)
_NA = {"N/A", "n/a", "NA", "-"}
_QUOTE_MAX = 240


class Model(BaseModel):
    """Immutable base of every parsed result."""

    model_config = FROZEN


def numbered(text: str) -> list[tuple[int, str]]:
    """``(line_number, line)`` pairs with line endings and trailing blanks removed."""
    return [(i, raw.rstrip("\r").rstrip()) for i, raw in enumerate(text.split("\n"), start=1)]


def fail(tool: str, lineno: int, line: str, why: str) -> ParseError:
    """Build the one error shape every parser raises: tool, line number, reason, quoted line."""
    quoted = line.strip()
    if len(quoted) > _QUOTE_MAX:  # one-line `rdma statistic` dumps run to 1 kB
        quoted = quoted[:_QUOTE_MAX] + "..."
    return ParseError(f"{tool}: line {lineno}: {why}: {quoted!r}")


def fail_empty(tool: str, text: str, why: str) -> ParseError:
    """Error for input that holds none of the expected structure: quote its first line."""
    for lineno, line in numbered(text):
        if line.strip():
            return fail(tool, lineno, line, why)
    return ParseError(f"{tool}: line 1: {why}: input is empty")


def is_prompt(line: str) -> bool:
    """True for a captured shell prompt + command line (never tool output)."""
    return bool(_PROMPT.match(line))


def last_content_line(lines: list[tuple[int, str]]) -> int:
    """Line number of the last non-blank line (0 if none)."""
    for lineno, line in reversed(lines):
        if line.strip():
            return lineno
    return 0


def parse_int(token: str) -> int:
    """Decimal counter value; SONiC prints thousands separators (``1,200``)."""
    t = token.strip().replace(",", "")
    if not re.fullmatch(r"[+-]?\d+", t):
        raise ValueError(f"not an integer: {token!r}")
    return int(t)


def parse_opt_int(token: str) -> int | None:
    """Like :func:`parse_int`, but ``N/A`` (counter not available) becomes ``None``."""
    if token.strip() in _NA:
        return None
    return parse_int(token)


def parse_opt_float(token: str) -> float | None:
    """A float, or ``None`` for ``N/A``."""
    if token.strip() in _NA:
        return None
    return float(token)


_BYTE_UNITS = {
    "B": 1,
    "BYTE": 1,
    "BYTES": 1,
    "KB": 1024,
    "KIB": 1024,
    "MB": 1024**2,
    "MIB": 1024**2,
    "GB": 1024**3,
    "GIB": 1024**3,
    "TB": 1024**4,
    "TIB": 1024**4,
}


def bytes_from_human(value: str) -> int | None:
    """``"40000 B"``, ``"146.48 KB"``, ``"1.43 MB"``, ``"0 Bytes"`` -> bytes; ``None`` if no unit.

    NVUE prints binary multiples: ``min-threshold 150000 B`` reads back as ``146.48 KB``
    (150000/1024) and 1501500 B as ``1.43 MB``, so the result is rounded, not exact.
    """
    m = re.fullmatch(r"\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", value)
    if not m:
        return None
    unit = _BYTE_UNITS.get(m.group(2).upper())
    if unit is None:
        return None
    return round(float(m.group(1).replace(",", "")) * unit)
