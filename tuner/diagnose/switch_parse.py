"""Parsers of the switch outputs ``diagnose`` reads (pure; samples and their sources in
docs/reference-notes/diagnose-formats.md).

SONiC: ``show interfaces status`` (intfutil), ``show interfaces counters`` (portstat) and ``show
interfaces flap`` (202505 and later), tabulate ``simple`` tables read by their dash line
(``objectives.parsers._table``), and ``show version``. Cumulus NVUE: ``nv show interface <swp>
link`` and ``nv show system``, key/value views read by ``objectives.parsers.parse_nvue``. Each
returns ``None`` (or leaves a port out) when the text does not hold what it parses, so the check
says "not checked" instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from objectives.parsers._common import numbered
from objectives.parsers._table import read_tables
from tuner.errors import ParseError

TOOL = "switch"


@dataclass(frozen=True)
class Port:
    """One switch port as the switch reports it; counters ``None`` where not shown (N/A)."""

    oper: str | None = None  # "up"/"down" (SONiC Oper, NVUE state / oper-status)
    speed_mbps: int | None = None
    rx_err: int | None = None
    tx_err: int | None = None
    flaps: int | None = None  # NVUE carrier-transitions, SONiC Flap Count


def speed_mbps(text: str | None) -> int | None:
    """``100G`` -> 100000, ``1000M`` -> 1000, ``N/A``/blank -> None."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GM])(?:b/s|bps)?\s*", text or "")
    if m is None:
        return None
    return int(float(m.group(1)) * (1000 if m.group(2) == "G" else 1))


def _count(text: str | None) -> int | None:
    t = (text or "").replace(",", "").strip()
    return int(t) if t.isdigit() else None


def _table(text: str, first: str, has: str | None = None) -> list[dict[str, str]] | None:
    """Rows (header -> cell) of the table whose first header is ``first`` (and which has a
    column ``has``)."""
    try:
        tables, _ = read_tables(TOOL, numbered(text))
    except ParseError:
        return None
    for t in tables:
        if t.headers[:1] == [first] and (has is None or has in t.headers):
            return [dict(zip(t.headers, cells, strict=False)) for _, _, cells in t.rows]
    return None


def sonic_status(text: str) -> dict[str, Port] | None:
    """``show interfaces status`` -> {port: oper, speed}."""
    rows = _table(text, "Interface")
    if rows is None:
        return None
    return {r["Interface"]: Port(oper=r.get("Oper"), speed_mbps=speed_mbps(r.get("Speed")))
            for r in rows}


def sonic_counters(text: str) -> dict[str, Port] | None:
    """``show interfaces counters`` -> {port: RX_ERR, TX_ERR} (``N/A`` -> None)."""
    rows = _table(text, "IFACE")
    if rows is None:
        return None
    return {r["IFACE"]: Port(rx_err=_count(r.get("RX_ERR")), tx_err=_count(r.get("TX_ERR")))
            for r in rows}


def sonic_flaps(text: str) -> dict[str, int] | None:
    """``show interfaces flap`` -> {port: Flap Count}; ``Never`` (no flap recorded) is 0, and a
    port whose count is neither is left out."""
    rows = _table(text, "Interface", has="Flap Count")
    if rows is None:
        return None
    out = {}
    for r in rows:
        cell = r.get("Flap Count", "").strip()
        n = 0 if cell == "Never" else _count(cell)
        if n is not None:
            out[r["Interface"]] = n
    return out


def sonic_version(text: str) -> str | None:
    """``SONiC Software Version: SONiC.<build>`` -> ``SONiC.<build>``."""
    m = re.search(r"^SONiC Software Version:\s*(\S+)\s*$", text, re.M)
    return m.group(1) if m else None


def _nvue(text: str) -> dict[str, str | None] | None:
    from objectives.parsers import parse_nvue

    try:
        return {k: v.value for k, v in parse_nvue(text).values.items()}
    except ParseError:
        return None


def nvue_link(text: str) -> Port | None:
    """``nv show interface <swp> link``: oper state (``oper-status`` where shown, else
    ``state``), speed, ``stats`` in-errors/out-errors/carrier-transitions."""
    v = _nvue(text)
    if not v or ("state" not in v and "oper-status" not in v):
        return None
    return Port(oper=v.get("oper-status") or v.get("state"),
                speed_mbps=speed_mbps(v.get("speed")),
                rx_err=_count(v.get("stats.in-errors")), tx_err=_count(v.get("stats.out-errors")),
                flaps=_count(v.get("stats.carrier-transitions")))


def nvue_build(text: str) -> str | None:
    """``nv show system`` ``build`` (``Cumulus Linux 5.5.0``)."""
    v = _nvue(text)
    return (v or {}).get("build") or None
