"""Parsers for SONiC ``show`` output: PFC counters, ECN/WRED profiles, queue and WRED counters,
PFC watchdog stats/config and buffer watermarks.

Values may carry thousands separators (``1,200``) and ``N/A`` (kept as ``None``); ``Last cached
time was ...`` lines are recorded, not parsed as data. ``to_counters()`` helpers give the
platform-neutral names of :mod:`objectives.measurement` (``pfc3_rx_pkts``,
``queue3_ecn_marked_pkts`` ...).
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
    parse_int,
    parse_opt_int,
)
from objectives.parsers._table import Table, is_dash_line, read_tables

_CACHED = re.compile(r"^\s*Last cached time (?:was|is)\s+(?P<t>.+?)\s*$")
_NAMESPACE = re.compile(r"^\s*For namespace\s*(?P<ns>\S*)\s*:?\s*$")


def _value(tool: str, lineno: int, line: str, cell: str) -> int | None:
    try:
        return parse_opt_int(cell)
    except ValueError:
        raise fail(tool, lineno, line, f"{cell!r} is not a counter value") from None


def _loose_ok(tool: str, loose: list[tuple[int, str]], *extra: re.Pattern[str]) -> list[str]:
    """Lines outside tables: prompts, blanks, cached-time and namespace notes are fine."""
    notes = []
    for lineno, line in loose:
        s = line.strip()
        if not s or is_prompt(line) or s.startswith("#") or _NAMESPACE.match(s):
            continue
        if _CACHED.match(s) or any(p.search(s) for p in extra):
            notes.append(s)
            continue
        raise fail(tool, lineno, line, "not part of any table")
    return notes


def _sonic_tables(
    tool: str, text: str, allow_truncated: bool, *extra: re.Pattern[str]
) -> tuple[list[tuple[int, str]], list[Table]]:
    """The numbered lines and tabulate tables of a SONiC show command; any other line must be
    one ``_loose_ok`` accepts."""
    lines = numbered(text)
    tables, loose = read_tables(
        tool, lines, allow_truncated=allow_truncated, last=last_content_line(lines)
    )
    _loose_ok(tool, loose, *extra)
    return lines, tables


# ---------------------------------------------------------------- show pfc counters


class PfcHistory(Model):
    """One ``show pfc counters --history`` row (pause times in microseconds)."""

    rx_pause_transitions: int | None
    total_rx_pause_time_us: int | None
    recent_rx_pause_time_us: int | None
    recent_rx_pause_timestamp: str | None


class PfcCounters(Model):
    """PFC frames per port and priority (``SAI_PORT_STAT_PFC_<p>_RX/TX_PKTS``)."""

    rx: dict[str, dict[int, int | None]] = Field(default_factory=dict)
    tx: dict[str, dict[int, int | None]] = Field(default_factory=dict)
    history: dict[str, dict[int, PfcHistory]] = Field(default_factory=dict)
    cached_at: str | None = None

    def to_counters(self) -> dict[str, dict[str, int]]:
        """``{"Ethernet0": {"pfc3_rx_pkts": 203, "pfc3_tx_pkts": 213, ...}}`` (N/A left out)."""
        out: dict[str, dict[str, int]] = {}
        for direction, table in (("rx", self.rx), ("tx", self.tx)):
            for port, prios in table.items():
                for prio, v in prios.items():
                    if v is not None:
                        out.setdefault(port, {})[f"pfc{prio}_{direction}_pkts"] = v
        return out


def parse_pfcstat(text: str, *, allow_truncated: bool = False) -> PfcCounters:
    """``show pfc counters`` / ``pfcstat`` (Rx and Tx tables) or ``--history``."""
    tool = "pfcstat"
    lines, tables = _sonic_tables(tool, text, allow_truncated)
    cached = next((m.group("t") for _, ln in lines if (m := _CACHED.match(ln))), None)
    rx: dict[str, dict[int, int | None]] = {}
    tx: dict[str, dict[int, int | None]] = {}
    history: dict[str, dict[int, PfcHistory]] = {}
    for t in tables:
        first = t.headers[0] if t.headers else ""
        if first in ("Port Rx", "Port Tx"):
            target = rx if first == "Port Rx" else tx
            prios = []
            for h in t.headers[1:]:
                m = re.fullmatch(r"PFC(\d)", h)
                if not m:
                    raise fail(tool, t.header_line, " ".join(t.headers), f"bad column {h!r}")
                prios.append(int(m.group(1)))
            for lineno, line, cells in t.rows:
                target[cells[0]] = {
                    p: _value(tool, lineno, line, c) for p, c in zip(prios, cells[1:], strict=True)
                }
        elif t.headers[:3] == ["Port", "Priority", "RX Pause Transitions"]:
            for lineno, line, cells in t.rows:
                if len(cells) != 6 or not re.fullmatch(r"PFC\d", cells[1]):
                    raise fail(tool, lineno, line, "bad --history row")
                history.setdefault(cells[0], {})[int(cells[1][3:])] = PfcHistory(
                    rx_pause_transitions=_value(tool, lineno, line, cells[2]),
                    total_rx_pause_time_us=_value(tool, lineno, line, cells[3]),
                    recent_rx_pause_time_us=_value(tool, lineno, line, cells[4]),
                    recent_rx_pause_timestamp=None if cells[5] == "N/A" else cells[5],
                )
        else:
            raise fail(tool, t.header_line, " ".join(t.headers), "not a pfcstat table")
    if not rx and not tx and not history:
        raise fail_empty(tool, text, "no 'Port Rx'/'Port Tx' table found")
    return PfcCounters(rx=rx, tx=tx, history=history, cached_at=cached)


# ---------------------------------------------------------------- ecnconfig -l / show ecn

_PROFILE = re.compile(r"^\s*Profile:\s*(?:\*\*)?(?P<name>[^*\s]+)(?:\*\*)?\s*$")
_TOTAL = re.compile(r"^\s*Total profiles:\s*(?P<n>\d+)\s*$")
_ECN_STATUS = re.compile(r"^\s*ECN status(?: for namespace (?P<ns>\S+))?:\s*$")
_QUEUE_STATUS = re.compile(r"^\s*(?:(?P<ports>\S+)\s+)?queue (?P<q>\d+): (?P<state>on|off)\s*$")


class QueueEcnStatus(Model):
    """One ``queue 3: on`` line of ``ecnconfig -q 3``."""

    namespace: str | None = None
    ports: list[str] = Field(default_factory=list)  # printed with -vv
    queue: int
    ecn_on: bool


class EcnConfig(Model):
    """WRED/ECN profiles: name -> field -> value (ints where numeric; field order is not fixed)."""

    profiles: dict[str, dict[str, int | str]] = Field(default_factory=dict)
    total_profiles: int | None = None  # printed with -vv
    queue_status: list[QueueEcnStatus] = Field(default_factory=list)


def parse_ecnconfig(text: str) -> EcnConfig:
    """``ecnconfig -l`` / ``show ecn`` (one two-column table per profile), ``ecnconfig -q``."""
    tool = "ecnconfig"
    profiles: dict[str, dict[str, int | str]] = {}
    current: dict[str, int | str] | None = None
    rules = 0
    total = None
    namespace: str | None = None
    queues: list[QueueEcnStatus] = []
    last_line = total_line = (1, "")
    for lineno, line in numbered(text):
        s = line.strip()
        if not s or is_prompt(line) or s.startswith("#"):
            continue
        last_line = (lineno, line)
        if m := _PROFILE.match(s):
            current = profiles.setdefault(m.group("name"), {})
            rules = 0
            continue
        if is_dash_line(s) and current is not None:
            rules += 1
            if rules == 2:
                current = None
            continue
        if current is not None and rules == 1:
            parts = s.split()
            if len(parts) != 2:
                raise fail(tool, lineno, line, "expected 'field value'")
            field, value = parts
            current[field] = int(value) if re.fullmatch(r"-?\d+", value) else value
            continue
        if m := _TOTAL.match(s):
            total = int(m.group("n"))
            total_line = (lineno, line)
            continue
        if m := _ECN_STATUS.match(s):
            namespace = m.group("ns")
            continue
        if m := _QUEUE_STATUS.match(s):
            queues.append(
                QueueEcnStatus(
                    namespace=namespace,
                    ports=m.group("ports").split(",") if m.group("ports") else [],
                    queue=int(m.group("q")),
                    ecn_on=m.group("state") == "on",
                )
            )
            continue
        raise fail(tool, lineno, line, "not part of an ecnconfig profile table")
    if current is not None:
        raise fail(tool, last_line[0], last_line[1], "profile table is not closed (truncated?)")
    if not profiles and not queues:
        raise fail_empty(tool, text, "no 'Profile:' table found")
    if total is not None and total != len(profiles):
        raise fail(tool, total_line[0], total_line[1], f"{len(profiles)} profiles printed")
    return EcnConfig(profiles=profiles, total_profiles=total, queue_status=queues)


# ---------------------------------------------------------------- queue / wred counters

_QUEUE = re.compile(r"^(?P<kind>UC|MC|ALL)(?P<idx>\d+)$")


class QueueCounterRow(Model):
    """One port queue. Units are in the field names; ``None`` = ``N/A``."""

    port: str
    queue: str  # as printed: UC3, MC13, ALL20
    kind: str  # UC, MC or ALL
    index: int
    values: dict[str, int | None]  # pkts/bytes columns as printed, e.g. "Drop/pkts"


class QueueCounters(Model):
    """``show queue counters`` or ``show queue wredcounters`` rows, in print order."""

    rows: list[QueueCounterRow] = Field(default_factory=list)
    cached_at: str | None = None

    def get(self, port: str, queue: str) -> QueueCounterRow:
        """The row of ``port`` and ``queue`` (``UC3``)."""
        for r in self.rows:
            if r.port == port and r.queue == queue:
                return r
        raise KeyError(f"{port} {queue}")

    def to_counters(self) -> dict[str, dict[str, int]]:
        """Neutral names (unicast/ALL queues): ``queue3_drop_pkts``, ``queue3_ecn_marked_pkts``."""
        names = {
            "Counter/pkts": "tx_pkts",
            "Counter/bytes": "tx_bytes",
            "Drop/pkts": "drop_pkts",
            "Drop/bytes": "drop_bytes",
            "WredDrp/pkts": "wred_drop_pkts",
            "WredDrp/bytes": "wred_drop_bytes",
            "EcnMarked/pkts": "ecn_marked_pkts",
            "EcnMarked/bytes": "ecn_marked_bytes",
        }
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            if r.kind == "MC":
                continue
            for col, v in r.values.items():
                if v is not None and col in names:
                    out.setdefault(r.port, {})[f"queue{r.index}_{names[col]}"] = v
        return out


_JSON_KEYS = {
    "totalpacket": "Counter/pkts",
    "totalbytes": "Counter/bytes",
    "droppacket": "Drop/pkts",
    "dropbytes": "Drop/bytes",
    "wreddroppacket": "WredDrp/pkts",
    "wreddropbytes": "WredDrp/bytes",
    "ecnmarkedpacket": "EcnMarked/pkts",
    "ecnmarkedbytes": "EcnMarked/bytes",
}


def _queue_json(tool: str, text: str) -> QueueCounters:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        bad = text.split("\n")[exc.lineno - 1]
        raise fail(tool, exc.lineno, bad, f"invalid JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise fail_empty(tool, text, "expected an object keyed by port")
    rows = []
    for port, queues in doc.items():
        if not isinstance(queues, dict):
            raise fail_empty(tool, text, f"port {port!r} is not an object")
        for q, vals in queues.items():
            m = _QUEUE.match(q)
            if not m or not isinstance(vals, dict):
                raise fail_empty(tool, text, f"bad queue {q!r} of {port}")
            try:
                values = {
                    str(_JSON_KEYS.get(k, k)): parse_opt_int(str(v)) for k, v in vals.items()
                }
            except ValueError as exc:
                raise fail_empty(tool, text, f"{port} {q}: {exc}") from None
            rows.append(
                QueueCounterRow(
                    port=port,
                    queue=q,
                    kind=m.group("kind"),
                    index=int(m.group("idx")),
                    values=values,
                )
            )
    return QueueCounters(rows=rows)


def _queue_tables(tool: str, text: str, allow_truncated: bool, want: str) -> QueueCounters:
    if text.lstrip().startswith("{"):
        return _queue_json(tool, text)
    lines, tables = _sonic_tables(tool, text, allow_truncated)
    rows = []
    for t in tables:
        if t.headers[:2] != ["Port", "TxQ"] or not any(want in h for h in t.headers):
            raise fail(tool, t.header_line, " ".join(t.headers), f"not a {tool} table")
        for lineno, line, cells in t.rows:
            m = _QUEUE.match(cells[1])
            if not m:
                raise fail(tool, lineno, line, f"bad queue name {cells[1]!r}")
            rows.append(
                QueueCounterRow(
                    port=cells[0],
                    queue=cells[1],
                    kind=m.group("kind"),
                    index=int(m.group("idx")),
                    values={
                        h: _value(tool, lineno, line, c)
                        for h, c in zip(t.headers[2:], cells[2:], strict=True)
                    },
                )
            )
    if not rows:
        raise fail_empty(tool, text, "no 'Port TxQ' table found")
    cached = next((m.group("t") for _, ln in lines if (m := _CACHED.match(ln))), None)
    return QueueCounters(rows=rows, cached_at=cached)


def parse_queue_counters(text: str, *, allow_truncated: bool = False) -> QueueCounters:
    """``show queue counters`` (text, multi-namespace) or ``show queue counters --json``."""
    return _queue_tables("queuestat", text, allow_truncated, "Counter/")


def parse_wredcounters(text: str, *, allow_truncated: bool = False) -> QueueCounters:
    """``show queue wredcounters``: WredDrp and EcnMarked pkts/bytes per queue."""
    return _queue_tables("wredstat", text, allow_truncated, "EcnMarked/")


# ---------------------------------------------------------------- pfcwd


class PfcwdStatsRow(Model):
    """One ``show pfcwd stats`` row; ``None`` = ``N/A``."""

    port: str
    queue: int
    status: str | None
    storm_detected: int | None
    storm_restored: int | None
    tx_ok: int | None
    tx_drop: int | None
    rx_ok: int | None
    rx_drop: int | None
    tx_last_ok: int | None
    tx_last_drop: int | None
    rx_last_ok: int | None
    rx_last_drop: int | None


class PfcwdStats(Model):
    """All rows of ``show pfcwd stats`` (multi-ASIC tables are concatenated)."""

    rows: list[PfcwdStatsRow] = Field(default_factory=list)

    def to_counters(self) -> dict[str, dict[str, int]]:
        """``pfcwd3_storm_detected`` / ``pfcwd3_storm_restored`` per port."""
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            if r.storm_detected is not None:
                out.setdefault(r.port, {})[f"pfcwd{r.queue}_storm_detected"] = r.storm_detected
            if r.storm_restored is not None:
                out.setdefault(r.port, {})[f"pfcwd{r.queue}_storm_restored"] = r.storm_restored
        return out


_PAIR_COLS = (
    ("STORM DETECTED/RESTORED", "storm_detected", "storm_restored"),
    ("TX OK/DROP", "tx_ok", "tx_drop"),
    ("RX OK/DROP", "rx_ok", "rx_drop"),
    ("TX LAST OK/DROP", "tx_last_ok", "tx_last_drop"),
    ("RX LAST OK/DROP", "rx_last_ok", "rx_last_drop"),
)


def parse_pfcwd_stats(text: str, *, allow_truncated: bool = False) -> PfcwdStats:
    """``show pfcwd stats`` (single or multi-ASIC): ``Ethernet0:3`` rows with ``a/b`` pairs."""
    tool = "pfcwd stats"
    lines, tables = _sonic_tables(tool, text, allow_truncated)
    rows = []
    for t in tables:
        if not t.headers or t.headers[0] != "QUEUE" or "STATUS" not in t.headers:
            raise fail(tool, t.header_line, " ".join(t.headers), "not a pfcwd stats table")
        idx = {h: i for i, h in enumerate(t.headers)}
        for lineno, line, cells in t.rows:
            port, _, q = cells[0].rpartition(":")
            if not port or not q.isdigit():
                raise fail(tool, lineno, line, f"bad queue {cells[0]!r}")
            data: dict = {"port": port, "queue": int(q)}
            status = cells[idx["STATUS"]]
            data["status"] = None if status == "N/A" else status
            for col, a, b in _PAIR_COLS:
                if col not in idx:
                    data[a] = data[b] = None
                    continue
                cell = cells[idx[col]]
                if cell == "N/A":
                    data[a] = data[b] = None
                    continue
                left, sep, right = cell.partition("/")
                if not sep:
                    raise fail(tool, lineno, line, f"{col} cell {cell!r} is not 'a/b'")
                data[a] = _value(tool, lineno, line, left)
                data[b] = _value(tool, lineno, line, right)
            rows.append(PfcwdStatsRow(**data))
    if not rows and not tables:
        raise fail_empty(tool, text, "no pfcwd stats table found")
    return PfcwdStats(rows=rows)


class PfcwdPortConfig(Model):
    """One ``show pfcwd config`` row (times in ms)."""

    port: str
    action: str
    detection_time_ms: int
    restoration_time_ms: int
    history: str | None = None  # newer format only (enable/disable)


class PfcwdConfig(Model):
    """``show pfcwd config``: global polling interval and per-port settings."""

    polling_interval_ms: int | None = None
    ports: dict[str, PfcwdPortConfig] = Field(default_factory=dict)


_POLL = re.compile(r"^\s*Changed polling interval to (?P<ms>\d+)\s*ms\s*$")


def parse_pfcwd_config(text: str, *, allow_truncated: bool = False) -> PfcwdConfig:
    """``show pfcwd config`` in the old (no HISTORY) and new (HISTORY column) formats."""
    tool = "pfcwd config"
    lines, tables = _sonic_tables(tool, text, allow_truncated, _POLL)
    poll = next((int(m.group("ms")) for _, ln in lines if (m := _POLL.match(ln))), None)
    ports: dict[str, PfcwdPortConfig] = {}
    for t in tables:
        if t.headers[:4] != ["PORT", "ACTION", "DETECTION TIME", "RESTORATION TIME"]:
            raise fail(tool, t.header_line, " ".join(t.headers), "not a pfcwd config table")
        for lineno, line, cells in t.rows:
            try:
                ports[cells[0]] = PfcwdPortConfig(
                    port=cells[0],
                    action=cells[1],
                    detection_time_ms=parse_int(cells[2]),
                    restoration_time_ms=parse_int(cells[3]),
                    history=cells[4] if len(cells) > 4 else None,
                )
            except ValueError as exc:
                raise fail(tool, lineno, line, str(exc)) from None
    if not tables:
        raise fail_empty(tool, text, "no pfcwd config table found")
    return PfcwdConfig(polling_interval_ms=poll, ports=ports)


# ---------------------------------------------------------------- watermarks


class Watermarks(Model):
    """``show priority-group|queue watermark ...``, ``show buffer_pool|headroom-pool watermark``.

    ``tables`` maps the printed title (``Ingress shared pool occupancy per PG: (Namespace
    asic0)``) to row key (port or pool) -> column (``PG3``, ``UC3``, ``Bytes``) -> bytes.
    """

    tables: dict[str, dict[str, dict[str, int | None]]] = Field(default_factory=dict)

    def merged(self) -> dict[str, dict[str, int | None]]:
        """All tables folded into one row-key -> column mapping (multi-ASIC views)."""
        out: dict[str, dict[str, int | None]] = {}
        for rows in self.tables.values():
            for key, cols in rows.items():
                out.setdefault(key, {}).update(cols)
        return out


def parse_watermark(text: str, *, allow_truncated: bool = False) -> Watermarks:
    """Any ``watermarkstat`` view (text, multi-ASIC, or ``--json`` list of rows)."""
    tool = "watermarkstat"
    if text.lstrip().startswith("["):
        try:
            doc = json.loads(text)
            rows = {}
            for item in doc:
                key = item.get("Port") or item.get("Pool")
                if not isinstance(key, str):
                    raise ValueError(f"row without a Port/Pool name: {item!r}")
                rows[key] = {
                    k: parse_opt_int(v) for k, v in item.items() if k not in ("Port", "Pool")
                }
        except (json.JSONDecodeError, ValueError, AttributeError, TypeError) as exc:
            raise fail_empty(tool, text, f"bad watermark JSON ({exc})") from None
        return Watermarks(tables={"": rows})
    lines, tables = _sonic_tables(tool, text, allow_truncated)
    out: dict[str, dict[str, dict[str, int | None]]] = {}
    for t in tables:
        if t.headers[0] not in ("Port", "Pool"):
            raise fail(tool, t.header_line, " ".join(t.headers), "not a watermark table")
        rows = {}
        for lineno, line, cells in t.rows:
            rows[cells[0]] = {
                h: _value(tool, lineno, line, c)
                for h, c in zip(t.headers[1:], cells[1:], strict=True)
            }
        out[t.title] = rows
    if not out:
        raise fail_empty(tool, text, "no watermark table found")
    return Watermarks(tables=out)
