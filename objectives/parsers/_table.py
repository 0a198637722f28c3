"""Reader for the tabulate ``simple`` tables SONiC prints (header, dashes, rows).

Column extents come from the dash line. Rows are split on whitespace when that gives one token
per column; otherwise (cells with spaces, such as timestamps) they are cut at the dash columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from objectives.parsers._common import fail

_DASH_LINE = re.compile(r"^\s*-+(?:\s+-+)*\s*$")


@dataclass
class Table:
    """One table: the title lines above it, its column names and its rows (with line numbers)."""

    title: str
    headers: list[str]
    rows: list[tuple[int, str, list[str]]] = field(default_factory=list)
    header_line: int = 0


def is_dash_line(line: str) -> bool:
    """True for a tabulate rule such as ``---------  ------  ------``."""
    return bool(_DASH_LINE.match(line)) and line.count("-") >= 3


def spans(dash_line: str) -> list[tuple[int, int]]:
    """``[start, end)`` of every run of dashes."""
    return [(m.start(), m.end()) for m in re.finditer(r"-+", dash_line)]


def cut(line: str, cols: list[tuple[int, int]]) -> list[str]:
    """Cells of ``line`` cut at the starts of ``cols`` (a cell may spill into the gap)."""
    out = []
    for i, (start, _end) in enumerate(cols):
        nxt = cols[i + 1][0] if i + 1 < len(cols) else len(line)
        lo = 0 if i == 0 else start
        out.append(line[lo:nxt].strip())
    return out


def split_row(line: str, cols: list[tuple[int, int]]) -> list[str]:
    """Whitespace split if it yields one cell per column, else cut at the dash columns."""
    tokens = line.split()
    if len(tokens) == len(cols):
        return tokens
    return cut(line, cols)


def read_tables(
    tool: str,
    lines: list[tuple[int, str]],
    *,
    allow_truncated: bool = False,
    last: int = 0,
    skip: re.Pattern[str] | None = None,
) -> tuple[list[Table], list[tuple[int, str]]]:
    """Find every header+dash table in ``lines``.

    Returns the tables and the lines that belong to no table (so each parser can decide what
    else it accepts). A row with fewer cells than columns is an error unless it is the last
    line and ``allow_truncated``.
    """
    tables: list[Table] = []
    loose: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        lineno, line = lines[i]
        nxt = lines[i + 1][1] if i + 1 < len(lines) else ""
        if line.strip() and is_dash_line(nxt) and not is_dash_line(line):
            cols = spans(nxt)
            headers = line.split()
            if len(headers) != len(cols):
                headers = cut(line, cols)
            title_parts: list[str] = []
            while loose and loose[-1][1].strip() and loose[-1][0] >= lineno - 2:
                title_parts.insert(0, loose.pop()[1].strip())
            table = Table(title=" ".join(title_parts), headers=headers, header_line=lineno)
            i += 2
            while i < len(lines):
                rlineno, row = lines[i]
                if not row.strip():
                    # tabulate separates row groups with blank lines (pfcstat --history); the
                    # doc example has one right after the rule. Continue if a row follows.
                    j = i + 1
                    while j < len(lines) and not lines[j][1].strip():
                        j += 1
                    if j < len(lines) and _starts_row(lines, j, len(cols)):
                        i = j
                        continue
                    break
                if is_dash_line(row) or (skip and skip.search(row)):
                    break
                if not _starts_row(lines, i, len(cols)) and _near_header(lines, i):
                    break  # the next table's title or header
                cells = split_row(row, cols)
                if len(row.split()) < len(cols) or any(c == "" for c in cells):
                    if allow_truncated and rlineno == last:
                        i += 1
                        break
                    raise fail(
                        tool, rlineno, row, f"row has fewer cells than the {len(cols)} columns"
                    )
                table.rows.append((rlineno, row, cells))
                i += 1
            tables.append(table)
            continue
        loose.append((lineno, line))
        i += 1
    return tables, loose


def _near_header(lines: list[tuple[int, str]], i: int) -> bool:
    """True if line ``i`` is a header (dash line next) or a title (dash line two below)."""
    for k in (i + 1, i + 2):
        if k < len(lines) and is_dash_line(lines[k][1]):
            return True
    return False


def _starts_row(lines: list[tuple[int, str]], i: int, ncols: int) -> bool:
    """True if line ``i`` has enough cells to be a row and is not a header or title."""
    return len(lines[i][1].split()) >= ncols and not _near_header(lines, i)
