"""Parser for nccl-tests (``all_reduce_perf`` & co.) stdout, every format from 2017 to v2.19.

Handles the ``error`` (float) vs ``#wrong`` (int) column, missing ``redop``/``root`` columns,
an empty ``redop`` cell (alltoall/allgather before 2022),
``N/A`` cells, ``mpirun --tag-output`` prefixes, NCCL_DEBUG lines interleaved with the table,
duplicated headers, zero-size rows and output whose leading ``#`` was eaten by Markdown.
Column meaning comes from the printed header, never from positions (see
reference/nccl-tests/FORMAT-NOTES.md).
"""

from __future__ import annotations

import re

from pydantic import Field

from objectives.measurement import CollectiveResult
from objectives.parsers._common import Model, fail, fail_empty, numbered, parse_opt_float
from tuner.errors import ParseError

TOOL = "nccl-tests"

_TAG = re.compile(r"^\[\d+,\d+\]<(stdout|stderr)>:")
_NCCL_LOG = re.compile(
    r"^\S+:\d+:\d+ \[\d+\] (?:(?P<src>\S+:\d+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT|ERROR)\b"
)
_ROW = re.compile(r"^\s*\d+\s+\d+\s")
_OPS = (
    "all_reduce",
    "all_gather",
    "alltoall",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "sendrecv",
    "scatter",
    "gather",
    "hypercube",
)
_PROG = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(_OPS) + r")_perf\w*")
_RANK = re.compile(
    r"^Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?(?:\s+Pid\s+(?P<pid>\d+))?\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]+)\]\s*(?P<name>.*)$"
)
_OOB = re.compile(r"^Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<status>\w+)")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(?P<bw>\S+)\s*(?P<note>.*)$")
_VERSION = re.compile(
    r"^nccl-tests version (?P<v>\S+)(?: nccl-headers=(?P<h>\d+))?(?: nccl-library=(?P<l>\d+))?"
)
_NTHREAD_KV = re.compile(r"([A-Za-z][A-Za-z ]*?):?\s+(\d+)(?:\((\w+)\))?(?=\s|$)")


class NcclDevice(Model):
    """One ``#  Rank ...`` line of the banner."""

    rank: int
    group: int | None = None
    pid: int | None = None
    host: str
    device: int
    bus_id: str  # `0x04` (old) or `0000:04:00` (v2.14.1+)
    name: str


class NcclHalf(Model):
    """Out-of-place or in-place half of a row. ``None`` where the tool printed ``N/A``."""

    time_us: float | None
    algbw_gbytes_per_s: float | None
    busbw_gbytes_per_s: float | None
    wrong: int | None = None  # `#wrong` column (2022+); None for N/A or the old format
    error: float | None = None  # old `error` column (max abs error), None in the new format
    extra: dict[str, float | None] = Field(default_factory=dict)  # i_min, i_p99 ... (-I 1)


class NcclRow(Model):
    """One message size."""

    line: int
    size_bytes: int
    count: int
    type: str
    redop: str | None = None
    root: int | None = None
    out_of_place: NcclHalf
    in_place: NcclHalf | None = None
    timestamp: str | None = None


class NcclTestsResult(Model):
    """A whole nccl-tests run: banner, table, footer and the NCCL WARN lines seen."""

    version: str | None = None
    nccl_headers: int | None = None
    nccl_library: int | None = None
    program: str | None = None
    op: str | None = None  # nccl-tests op name (all_reduce, alltoall ...) if the program is named
    params: dict[str, int] = Field(default_factory=dict)  # nThread line: nThread, iters ...
    blocking: bool = False
    devices: list[NcclDevice] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list)
    rows: list[NcclRow] = Field(default_factory=list)
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbytes_per_s: float | None = None
    avg_note: str = ""  # trailing text after the average (set with NCCL_TESTS_MIN_BW)
    nccl_warnings: list[str] = Field(default_factory=list)
    complete: bool = False  # the footer was printed
    truncated_line: str | None = None  # partial last line accepted with allow_truncated
    truncated: bool = False  # cut off (no footer or a partial last line): complete rows only

    @property
    def nranks(self) -> int | None:
        """Distinct ranks in the banner (None when the banner was not captured)."""
        return len({d.rank for d in self.devices}) or None

    @property
    def wrong_total(self) -> int:
        """Sum of every ``#wrong`` cell (``N/A`` counts as 0)."""
        return sum(
            (h.wrong or 0)
            for r in self.rows
            for h in (r.out_of_place, r.in_place)
            if h is not None
        )

    @property
    def failed(self) -> bool:
        """True if any data was wrong: nonzero ``#wrong`` or ``Out of bounds ... FAILED``."""
        return self.wrong_total > 0 or self.out_of_bounds_ok is False or bool(self.out_of_bounds)

    def collective_results(
        self,
        name: str | None = None,
        ranks: int | None = None,
        *,
        in_place: bool = False,
        line_rate_gbytes_per_s: float = 0.0,
    ) -> list[CollectiveResult]:
        """One :class:`CollectiveResult` per row (out-of-place half unless ``in_place``).

        ``wrong`` carries the row's ``#wrong`` count; in the old ``error`` format, where only
        the footer says FAILED, every row gets the footer's out-of-bounds count so the failure
        cannot be lost.
        """
        op = name or self.op
        n = ranks or self.nranks
        if op is None:
            raise ParseError(f"{TOOL}: collective name not printed in the output; pass name=")
        if n is None:
            raise ParseError(f"{TOOL}: rank count not printed in the output; pass ranks=")
        out: list[CollectiveResult] = []
        for row in self.rows:
            half = row.in_place if in_place else row.out_of_place
            if half is None or half.time_us is None:
                continue
            wrong = half.wrong or 0
            if half.wrong is None and half.error is not None and self.out_of_bounds:
                wrong = self.out_of_bounds
            out.append(
                CollectiveResult(
                    name=op,
                    size_bytes=row.size_bytes,
                    ranks=n,
                    time_us=half.time_us,
                    algbw_gbytes_per_s=half.algbw_gbytes_per_s or 0.0,
                    busbw_gbytes_per_s=half.busbw_gbytes_per_s or 0.0,
                    wrong=wrong,
                    line_rate_gbytes_per_s=line_rate_gbytes_per_s,
                )
            )
        return out


def _strip(line: str) -> tuple[str, bool]:
    """Remove a ``--tag-output`` prefix; report whether the line came from stderr."""
    m = _TAG.match(line)
    if not m:
        return line, False
    return line[m.end() :], m.group(1) == "stderr"


def _header_columns(body: str) -> list[str] | None:
    """Column names if ``body`` (without '#') is the table's column-name line."""
    tokens = body.split()
    if len(tokens) >= 6 and tokens[0] == "size" and tokens[1] == "count" and "busbw" in tokens:
        return tokens
    return None


def _parse_nthread(body: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value, _unit in _NTHREAD_KV.findall(body):
        out[key.strip().replace(" ", "_")] = int(value)
    return out


def _parse_row(lineno: int, line: str, columns: list[str]) -> NcclRow:
    tokens = line.split()
    if "timestamp" in columns and len(tokens) == len(columns) + 1:
        tokens = tokens[:-2] + [tokens[-2] + " " + tokens[-1]]
    if "redop" in columns and len(tokens) == len(columns) - 1:
        # Before 2022 alltoall/allgather passed an empty op name: `%6s` of "" is six blanks,
        # so the redop column is empty (nccl-tests issue 78); the next cell is a number.
        i = columns.index("redop")
        if i < len(tokens) and not tokens[i][:1].isalpha():
            tokens.insert(i, "")
    if len(tokens) != len(columns):
        raise fail(TOOL, lineno, line, f"row has {len(tokens)} fields, header has {len(columns)}")
    try:
        fixed: dict[str, str] = {}
        halves: list[dict[str, str]] = []
        timestamp = None
        for col, tok in zip(columns, tokens, strict=True):
            if col == "timestamp":
                timestamp = tok
            elif col in ("time", "cputime"):  # each half starts with its time column
                halves.append({"time": tok})
            elif halves:
                halves[-1][col] = tok
            else:
                fixed[col] = tok
        parsed = [_half(h) for h in halves]
        if not parsed:
            raise ValueError("no time/algbw/busbw columns")
        return NcclRow(
            line=lineno,
            size_bytes=int(fixed["size"]),
            count=int(fixed["count"]),
            type=fixed.get("type", ""),
            redop=fixed.get("redop"),
            root=int(fixed["root"]) if "root" in fixed else None,
            out_of_place=parsed[0],
            in_place=parsed[1] if len(parsed) > 1 else None,
            timestamp=timestamp,
        )
    except (ValueError, KeyError) as exc:
        raise fail(TOOL, lineno, line, f"bad row ({exc})") from None


def _half(cells: dict[str, str]) -> NcclHalf:
    wrong_tok = cells.get("#wrong")
    err_tok = cells.get("error")
    wrong = None
    if wrong_tok is not None and wrong_tok != "N/A":
        w = float(wrong_tok)  # `%6g` may print 1e+06
        if w != int(w) or w < 0:
            raise ValueError(f"#wrong is not a count: {wrong_tok}")
        wrong = int(w)
    extra = {
        k: parse_opt_float(v)
        for k, v in cells.items()
        if k not in ("time", "algbw", "busbw", "#wrong", "error")
    }
    return NcclHalf(
        time_us=parse_opt_float(cells["time"]),
        algbw_gbytes_per_s=parse_opt_float(cells["algbw"]),
        busbw_gbytes_per_s=parse_opt_float(cells["busbw"]),
        wrong=wrong,
        error=parse_opt_float(err_tok) if err_tok is not None else None,
        extra=extra,
    )


def parse_nccl_tests(text: str, *, allow_truncated: bool = False) -> NcclTestsResult:
    """Parse the stdout of an nccl-tests binary.

    Lines before the banner (shell prompts, mpirun noise) are ignored. Inside the table every
    line must be a data row, a ``#`` comment, an NCCL log line or stderr. Without
    ``allow_truncated`` the footer (``Avg bus bandwidth``) is required; with it, a cut-off last
    line and a missing footer are accepted (``complete`` stays False).

    >>> r = parse_nccl_tests(open("all_reduce.txt").read())  # doctest: +SKIP
    >>> r.rows[-1].out_of_place.busbw_gbytes_per_s, r.avg_busbw_gbytes_per_s  # doctest: +SKIP
    (338.82, 70.742)
    """
    lines = numbered(text)
    last = max((n for n, ln in lines if _strip(ln)[0].strip()), default=0)
    data: dict = {
        "params": {},
        "devices": [],
        "rows": [],
        "nccl_warnings": [],
        "columns": [],
    }
    columns: list[str] | None = None
    in_table = False
    seen_any = False
    for lineno, raw in lines:
        line, from_stderr = _strip(raw)
        stripped = line.strip()
        if not stripped:
            continue
        log = _NCCL_LOG.match(stripped)
        if log:
            if log.group("level") in ("WARN", "ERROR", "ABORT"):
                data["nccl_warnings"].append(stripped)
            continue
        if from_stderr:
            continue
        body = stripped[1:].strip() if stripped.startswith("#") else stripped
        cols = _header_columns(body)
        if cols is not None:
            columns = cols
            data["columns"] = cols
            in_table = True
            seen_any = True
            continue
        if _ROW.match(line) and not stripped.startswith("#"):
            if columns is None:
                raise fail(TOOL, lineno, raw, "data row before the column header")
            try:
                data["rows"].append(_parse_row(lineno, line, columns))
            except ParseError:
                if allow_truncated and lineno == last:
                    data["truncated_line"] = stripped
                    continue
                raise
            continue
        if m := _OOB.match(body):
            data["out_of_bounds"] = int(m.group("n"))
            data["out_of_bounds_ok"] = m.group("status") == "OK"
            continue
        if m := _AVG.match(body):
            try:
                data["avg_busbw_gbytes_per_s"] = float(m.group("bw"))
            except ValueError:
                raise fail(TOOL, lineno, raw, "average bus bandwidth is not a number") from None
            data["avg_note"] = m.group("note").strip()
            data["complete"] = True
            in_table = False
            continue
        if body.startswith("nThread "):
            data["params"] = _parse_nthread(body)
            seen_any = True
            continue
        if m := _RANK.match(body):
            data["devices"].append(
                NcclDevice(
                    rank=int(m.group("rank")),
                    group=int(m.group("group")) if m.group("group") else None,
                    pid=int(m.group("pid")) if m.group("pid") else None,
                    host=m.group("host"),
                    device=int(m.group("dev")),
                    bus_id=m.group("bus"),
                    name=m.group("name").strip(),
                )
            )
            continue
        if m := _VERSION.match(body):
            data["version"] = m.group("v")
            data["nccl_headers"] = int(m.group("h")) if m.group("h") else None
            data["nccl_library"] = int(m.group("l")) if m.group("l") else None
            continue
        if body.startswith("Blocking Enabled"):
            data["blocking"] = True
            continue
        if body.startswith("Collective test starting:"):
            data["program"] = body.split(":", 1)[1].strip()
            continue
        if "program" not in data and (m := _PROG.search(stripped)):
            data["program"] = m.group(0)
        if stripped.startswith("#") or body.startswith(
            ("(B)", "out-of-place", "Using devices", "Errors with asterisks")
        ):
            continue
        if in_table:
            if allow_truncated and lineno == last:
                data["truncated_line"] = stripped
                continue
            raise fail(TOOL, lineno, raw, "unexpected line inside the result table")
        # Anything else outside the table (prompts, mpirun chatter) is not ours to judge.
    if not seen_any or (not data["rows"] and not allow_truncated):
        raise fail_empty(TOOL, text, "no nccl-tests result table found")
    if not data.get("complete") and not allow_truncated:
        lineno = last or 1
        raise fail(
            TOOL, lineno, dict(lines).get(lineno, ""), "output ends before the footer (truncated?)"
        )
    if prog := data.get("program"):
        m = _PROG.search(prog)
        data["op"] = m.group(1) if m else None
    data["truncated"] = not data.get("complete") or data.get("truncated_line") is not None
    return NcclTestsResult(**data)


_NET_IB = re.compile(
    r"NET/IB\s*:\s*Using\s+(?P<devs>.*?)\s*(?P<ro>\[RO\])?\s*;\s*OOB\s+(?P<oob>\S+)"
)
_NET_DEV = re.compile(
    r"\[(?P<i>\d+)\](?P<dev>[^:\s]+):(?P<port>\d+)/(?P<link>[A-Za-z]+)(?P<flags>(?:/\w+)*)"
)
_LOG_FULL = re.compile(
    r"^(?P<host>\S+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:(?P<src>\S+:\d+) )?"
    r"NCCL (?P<level>[A-Z]+) (?P<msg>.*)$"
)


class NcclLogLine(Model):
    """One NCCL_DEBUG line: ``<host>:<pid>:<tid> [<cudaDev>] [file:line] NCCL <LEVEL> msg``."""

    line: int
    host: str
    pid: int
    tid: int
    cuda_dev: int
    level: str
    source: str | None = None
    message: str


class NcclNetDevice(Model):
    """One device of a ``NET/IB : Using [0]mlx5_0:1/RoCE ...`` line."""

    index: int
    device: str
    port: int
    link_layer: str  # RoCE or IB
    flags: list[str] = Field(default_factory=list)  # e.g. SHARP


class NcclDebugLog(Model):
    """NCCL_DEBUG lines found in any output, and the IB/RoCE devices NCCL chose."""

    lines: list[NcclLogLine] = Field(default_factory=list)
    net_devices: list[NcclNetDevice] = Field(default_factory=list)
    relaxed_ordering: bool | None = None  # `[RO]` in the NET/IB line (newer NCCL)
    oob_interface: str | None = None
    network: str | None = None  # `Using network IBext_v6`

    @property
    def warnings(self) -> list[NcclLogLine]:
        """WARN lines (a measurement with any of them is suspect)."""
        return [ln for ln in self.lines if ln.level == "WARN"]


def parse_nccl_debug(text: str) -> NcclDebugLog:
    """Collect the NCCL_DEBUG lines of any output (other lines are ignored).

    Raises :class:`ParseError` if there is not a single NCCL log line.
    """
    found: list[NcclLogLine] = []
    data: dict = {}
    nets: list[NcclNetDevice] = []
    for lineno, raw in numbered(text):
        line = _strip(raw)[0].strip()
        m = _LOG_FULL.match(line)
        if not m:
            continue
        msg = m.group("msg").strip()
        found.append(
            NcclLogLine(
                line=lineno,
                host=m.group("host"),
                pid=int(m.group("pid")),
                tid=int(m.group("tid")),
                cuda_dev=int(m.group("dev")),
                level=m.group("level"),
                source=m.group("src"),
                message=msg,
            )
        )
        if (ib := _NET_IB.search(msg)) and not nets:
            for d in _NET_DEV.finditer(ib.group("devs")):
                nets.append(
                    NcclNetDevice(
                        index=int(d.group("i")),
                        device=d.group("dev"),
                        port=int(d.group("port")),
                        link_layer=d.group("link"),
                        flags=[f for f in d.group("flags").split("/") if f],
                    )
                )
            data["relaxed_ordering"] = ib.group("ro") is not None
            data["oob_interface"] = ib.group("oob")
        if msg.startswith("Using network "):
            data["network"] = msg.split()[2]
    if not found:
        raise fail_empty(TOOL, text, "no NCCL_DEBUG line found")
    return NcclDebugLog(lines=found, net_devices=nets, **data)
