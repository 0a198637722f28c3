"""Parser for Cumulus Linux NVUE ``nv show ...`` output, text and ``-o json``.

Text output is made of (reference/cumulus-nvue/):
- a key/value table with ``operational``/``applied``/``description`` columns, whose keys nest by
  two-space indentation (``pfc`` / ``  pfc-priority 3``), and
- titled sub-tables (``ECN Configurations`` underlined with ``=``, then header, dashes, rows;
  or ``No Data``).
Values keep the printed text; :func:`bytes_from_human` turns ``"40000 B"``, ``"146.48 KB"``,
``"1.43 MB"`` into bytes (binary multiples, so read-backs are rounded). Covers
``nv show qos congestion-control``, ``qos pfc``, ``qos roce``, ``interface <swp> qos roce
status|counters``, ``interface <swp> counters qos`` (CL >= 5.5; ``qos counters`` before) and
``interface <swp> qos pfc-watchdog``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field

from objectives.parsers._common import (
    Model,
    bytes_from_human,
    fail,
    fail_empty,
    is_prompt,
    numbered,
)
from objectives.parsers._table import cut, is_dash_line, spans

TOOL = "nvue"
_UNDERLINE = re.compile(r"^\s*=+\s*$")
_KV_COLS = {"operational", "applied", "description", "pending"}


class NvueValue(Model):
    """One key of a key/value table (``None`` where the column is blank)."""

    operational: str | None = None
    applied: str | None = None
    pending: str | None = None  # `-r pending` views
    description: str | None = None

    @property
    def value(self) -> str | None:
        """Operational value, else applied."""
        return self.operational if self.operational not in (None, "") else self.applied

    def as_int(self) -> int | None:
        """The value as an integer: plain number or bytes with a unit; ``None`` otherwise."""
        return to_number(self.value)


def to_number(value: str | None) -> int | None:
    """``"100"`` -> 100, ``"146.48 KB"`` -> 149996, ``"n/a"``/text -> ``None``."""
    if value is None:
        return None
    v = value.strip()
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return bytes_from_human(v)


def within_display(exact: int, shown: str) -> bool:
    """Whether ``exact`` bytes print as ``shown`` at NVUE's precision: ``"146.48 KB"`` stands for
    any byte count whose binary-KB value rounds to 146.48 (149995..150005), so 150000 matches
    and 151000 does not. Plain integers and ``B``/``Bytes`` must match exactly."""
    m = re.fullmatch(r"\s*(-?[0-9][0-9,]*)(?:\.([0-9]+))?\s*([A-Za-z]*)\s*", shown)
    if not m:
        return False
    unit = _UNITS.get(m.group(3).upper()) if m.group(3) else 1
    if unit is None:
        return False
    decimals = len(m.group(2) or "")
    number = float(m.group(1).replace(",", "") + ("." + m.group(2) if m.group(2) else ""))
    return abs(exact / unit - number) <= 0.5 * 10 ** -decimals + 1e-9


_UNITS = {"B": 1, "BYTES": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


class NvueShow(Model):
    """``values``: dotted key path -> value; ``tables``: title -> rows (column -> cell)."""

    values: dict[str, NvueValue] = Field(default_factory=dict)
    tables: dict[str, list[dict[str, str]]] = Field(default_factory=dict)

    def numbers(self) -> dict[str, int]:
        """Every numeric value: key paths, and table cells as ``title/row-id/column``."""
        out = {k: n for k, v in self.values.items() if (n := v.as_int()) is not None}
        for title, rows in self.tables.items():
            for row in rows:
                rid = next(iter(row.values()), "")
                for col, cell in list(row.items())[1:]:
                    if (n := to_number(cell)) is not None:
                        out[f"{title}/{rid}/{col}"] = n
        return out

    def ecn_profiles(self) -> dict[int, dict[str, int | bool | None]]:
        """Per traffic class ECN/RED settings (``ECN Configurations`` table or JSON paths)."""
        out: dict[int, dict[str, int | bool | None]] = {}
        for row in self.tables.get("ECN Configurations", []):
            out[int(row["traffic-class"])] = {
                "ecn": row.get("ECN") == "enable",
                "red": row.get("RED") == "enable",
                "min_threshold_bytes": to_number(row.get("Min Th")),
                "max_threshold_bytes": to_number(row.get("Max Th")),
                "probability": to_number(row.get("Probability")),
            }
        for path, v in self.values.items():
            m = re.fullmatch(r"(?:.*\.)?traffic-class\.(\d+)\.([\w-]+)", path)
            if not m:
                continue
            prof = out.setdefault(int(m.group(1)), {})
            key = {"min-threshold": "min_threshold_bytes", "max-threshold": "max_threshold_bytes"}
            field = key.get(m.group(2), m.group(2))
            prof[field] = v.value == "enable" if field in ("ecn", "red") else v.as_int()
        return out

    def to_counters(self) -> dict[str, int]:
        """Platform-neutral counter names from the QoS counter views (see measurement.py)."""
        out: dict[str, int] = {}
        for row in self.tables.get("PFC Statistics", []):
            p = row.get("switch-priority")
            for col, name in (("rx-pause-frames", "rx_pkts"), ("tx-pause-frames", "tx_pkts")):
                if p is not None and (n := to_number(row.get(col))) is not None:
                    out[f"pfc{p}_{name}"] = n
        for row in self.tables.get("Egress Queue Statistics", []):
            q = row.get("traffic-class")
            for col, name in (
                ("tx-frames", "tx_pkts"),
                ("tx-bytes", "tx_bytes"),
                ("wred-discards", "wred_drop_pkts"),
            ):
                if q is not None and (n := to_number(row.get(col))) is not None:
                    out[f"queue{q}_{name}"] = n
        for row in self.tables.get("Qos Port Statistics", []):
            if row.get("Counter") == "ecn-marked-packets":
                if (n := to_number(row.get("Transmit"))) is not None:
                    out["ecn_marked_pkts"] = n
        ecn = self.values.get("tx-stats.tx-ecn-stats.ecn-marked-packets")
        if ecn is not None and (n := ecn.as_int()) is not None:
            out["ecn_marked_pkts"] = n
        return out


def _flatten(prefix: str, node: Any, out: dict[str, NvueValue]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _flatten(f"{prefix}.{i}", v, out)
    else:
        text = node if isinstance(node, str) else json.dumps(node)
        out[prefix] = NvueValue(operational=text)


def _parse_json(text: str) -> NvueShow:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.split("\n")
        bad = lines[exc.lineno - 1] if exc.lineno - 1 < len(lines) else ""
        raise fail(TOOL, exc.lineno, bad, f"invalid JSON ({exc.msg})") from None
    if not isinstance(doc, dict | list) or not doc:
        raise fail_empty(TOOL, text, "JSON output is not an object")
    values: dict[str, NvueValue] = {}
    _flatten("", doc, values)
    return NvueShow(values=values)


def _read_rows(
    lines: list[tuple[int, str]], i: int, cols: list[tuple[int, int]]
) -> tuple[list[tuple[int, str]], int]:
    """Rows after a dash line: until a title, a new table or a blank line before non-rows."""
    rows: list[tuple[int, str]] = []
    while i < len(lines):
        lineno, line = lines[i]
        if not line.strip():
            j = i + 1
            while j < len(lines) and not lines[j][1].strip():
                j += 1
            if j < len(lines) and not rows and not _is_title(lines, j):
                i = j  # blank line between the rule and the first row (PFC WD Status)
                continue
            break
        if _is_title(lines, i) or (i + 1 < len(lines) and is_dash_line(lines[i + 1][1])):
            break
        if is_prompt(line):
            break
        rows.append((lineno, line))
        i += 1
    return rows, i


def _is_title(lines: list[tuple[int, str]], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and bool(_UNDERLINE.match(lines[i + 1][1]))
        and bool(lines[i][1].strip())
    )


def parse_nvue(text: str) -> NvueShow:
    """Parse one ``nv show ...`` output (text or ``-o json``)."""
    if text.lstrip().startswith(("{", "[")):
        return _parse_json(text)
    lines = [(n, ln) for n, ln in numbered(text) if not is_prompt(ln) and not ln.startswith("#")]
    values: dict[str, NvueValue] = {}
    tables: dict[str, list[dict[str, str]]] = {}
    found = False
    i = 0
    while i < len(lines):
        lineno, line = lines[i]
        if not line.strip():
            i += 1
            continue
        if _is_title(lines, i):
            title = line.strip()
            i += 2
            while i < len(lines) and not lines[i][1].strip():
                i += 1
            if i < len(lines) and lines[i][1].strip() == "No Data":
                tables[title] = []
                i += 1
                found = True
                continue
            if not (i + 1 < len(lines) and is_dash_line(lines[i + 1][1])):
                bad = lines[i] if i < len(lines) else (lineno, line)
                raise fail(TOOL, bad[0], bad[1], f"table {title!r} has no header")
            cols = spans(lines[i + 1][1])
            headers = cut(lines[i][1], cols)
            headers = [h or "id" for h in headers]
            rows, i = _read_rows(lines, i + 2, cols)
            table = []
            for rlineno, r in rows:
                cells = cut(r, cols)
                if sum(1 for c in cells if c) < min(2, len(cols)):
                    raise fail(TOOL, rlineno, r, f"too few cells for table {title!r}")
                table.append(dict(zip(headers, cells, strict=True)))
            tables[title] = table
            found = True
            continue
        if i + 1 < len(lines) and is_dash_line(lines[i + 1][1]):
            cols = spans(lines[i + 1][1])
            headers = cut(line, cols)
            names = [h for h in headers[1:]]
            if not set(names) <= _KV_COLS or not names:
                raise fail(TOOL, lineno, line, "expected operational/applied/description columns")
            rows, i = _read_rows(lines, i + 2, cols)
            stack: list[tuple[int, str]] = []
            for _rlineno, row in rows:
                cells = cut(row, cols)
                key = row[: cols[1][0]].rstrip() if len(cols) > 1 else row.rstrip()
                indent = len(key) - len(key.lstrip())
                key = key.strip()
                if not key:
                    continue
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                path = ".".join([k for _, k in stack] + [key])
                vals = dict(zip(names, cells[1:], strict=True))
                if any(vals.values()):
                    values[path] = NvueValue(**{k: (v or None) for k, v in vals.items()})
                stack.append((indent, key))
            found = True
            continue
        if line.strip() == "...":
            raise fail(TOOL, lineno, line, "output was cut here")
        raise fail(TOOL, lineno, line, "not part of an NVUE table")
    if not found:
        raise fail_empty(TOOL, text, "no NVUE table found")
    return NvueShow(values=values, tables=tables)
