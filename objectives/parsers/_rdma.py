"""Parser for RDMA hardware counters: sysfs listings and ``rdma statistic show``.

Accepted forms (reference/mlx5-rdma-counters/):
- ``name value`` lines (``for f in hw_counters/*; do echo $f $(cat $f); done``, ``grep -oP``),
- ``name: value`` lines (``grep . *``, ``show_counters``; ``Port 1 hw counters:`` header),
- ``rdma statistic show``: ``link <dev>/<port> name value ...`` single-line or wrapped at any
  token, ``-p`` (one TAB-indented counter per line), optional counters inline or after
  ``Optional-set:``, and ``rdma -j statistic show`` JSON.
The counter set depends on firmware caps, so no name is required.
"""

from __future__ import annotations

import json
import re

from pydantic import Field

from objectives.parsers._common import (
    Model,
    fail,
    fail_empty,
    is_prompt,
    last_content_line,
    numbered,
)

TOOL = "hw_counters"
_LINK = re.compile(r"^link\s+(?P<link>\S+/\d+)(?:\s+(?P<rest>.*))?$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KV = re.compile(r"^\s*(?:\S*/)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*[:\s]\s*(?P<value>\d+)\s*$")
_PORT_HDR = re.compile(r"^Port\s+(?P<port>\d+)\s+hw counters:\s*$")


class HwCounters(Model):
    """Counters per link (``mlx5_0/1``); plain listings are filed under ``default_link``."""

    links: dict[str, dict[str, int]] = Field(default_factory=dict)

    def counters(self, link: str | None = None) -> dict[str, int]:
        """The counters of ``link`` (or of the only link)."""
        if link is None:
            if len(self.links) != 1:
                raise KeyError(f"several links, name one of {sorted(self.links)}")
            return next(iter(self.links.values()))
        return self.links[link]


def _parse_json(text: str) -> HwCounters:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.split("\n")
        bad = lines[exc.lineno - 1] if exc.lineno - 1 < len(lines) else ""
        raise fail("rdma -j statistic", exc.lineno, bad, f"invalid JSON ({exc.msg})") from None
    if isinstance(doc, dict):
        doc = [doc]
    links: dict[str, dict[str, int]] = {}
    for item in doc:
        if not isinstance(item, dict) or "ifname" not in item:
            raise fail_empty("rdma -j statistic", text, "expected objects with 'ifname'")
        name = f"{item['ifname']}/{item.get('port', 1)}"
        row: dict[str, int] = {}
        for key, value in item.items():
            if key in ("ifindex", "ifname", "port"):
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                row[key] = value
            elif isinstance(value, dict):  # optional counters nested by newer iproute2
                row.update({k: v for k, v in value.items() if isinstance(v, int)})
        links[name] = row
    return HwCounters(links=links)


def parse_hw_counters(
    text: str, *, default_link: str = "-", allow_truncated: bool = False
) -> HwCounters:
    """Parse a hw_counters listing or ``rdma statistic show`` output (see module doc)."""
    if text.lstrip().startswith(("[", "{")):
        return _parse_json(text)
    lines = numbered(text)
    last = last_content_line(lines)
    links: dict[str, dict[str, int]] = {}
    current: str | None = None  # inside an `rdma statistic` block
    pending: tuple[str, int, str] | None = None  # a name waiting for its value (wrapped line)
    for lineno, line in lines:
        s = line.strip()
        if not s or s.startswith("#") or is_prompt(line):
            continue
        if m := _PORT_HDR.match(s):
            current = None
            links.setdefault(f"{default_link}", {})
            continue
        if m := _LINK.match(s):
            if pending is not None:
                raise fail(TOOL, pending[1], pending[2], f"counter {pending[0]!r} has no value")
            current = m.group("link")
            links.setdefault(current, {})
            s = m.group("rest") or ""
        elif current is None:
            kv = _KV.match(s)
            if kv is None:
                if allow_truncated and lineno == last:
                    continue
                raise fail(TOOL, lineno, line, "expected 'name value' or 'name: value'")
            links.setdefault(default_link, {})[kv.group("name")] = int(kv.group("value"))
            continue
        if s.startswith("Optional-set:"):
            s = s[len("Optional-set:") :]
        for tok in s.split():
            if pending is None:
                if not _NAME.fullmatch(tok):
                    raise fail(TOOL, lineno, line, f"expected a counter name, got {tok!r}")
                pending = (tok, lineno, line)
            else:
                if not tok.isdigit():
                    raise fail(TOOL, lineno, line, f"counter {pending[0]!r} has value {tok!r}")
                links[current][pending[0]] = int(tok)  # type: ignore[index]
                pending = None
    if pending is not None and not allow_truncated:
        raise fail(TOOL, pending[1], pending[2], f"counter {pending[0]!r} has no value")
    if not any(links.values()):
        raise fail_empty(TOOL, text, "no counters found")
    return HwCounters(links={k: v for k, v in links.items() if v})
