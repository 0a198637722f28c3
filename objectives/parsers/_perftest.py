"""Parser for perftest (``ib_write_bw``, ``ib_read_lat`` ...) stdout.

A capture may hold several runs (one banner + table each). Rows contain TABs and latency values
can run together (``2465.901216.65``), so floats are tokenised by their fixed two decimals.
Bandwidth is normalised to Gb/s (1e9 bit/s). perftest divides bytes/s by
``format_factor = (report_fmt == MBS) ? 0x100000 : 125000000`` (src/perftest_resources.c), so
``MB/sec`` was always MiB/s (relabelled ``MiB/sec`` in 24.07, commit 1d202bb) and ``Gb/sec``
(``--report_gbits``) is 1e9 bit/s.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from objectives.measurement import LatencyResult
from objectives.parsers._common import Model, fail, fail_empty, numbered
from tuner.errors import ParseError

TOOL = "perftest"

_DASHES = re.compile(r"^\s*-{20,}\s*$")
_TITLE = re.compile(r"^\s*(?P<title>\S.*?\b(?:BW|Latency|Lat)\s+Test)\s*$")
_ROW = re.compile(r"^\s*\d+\s+\d+(?:\s|$)")
_BW_HDR = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[")
_LAT_HDR = re.compile(r"#bytes\s+#iterations\s+t_")
_ADDR = re.compile(r"^\s*(?P<side>local|remote) address\s*:\s*(?P<rest>.*)$")
_GID = re.compile(r"^\s*GID\s*:\s*(?P<gid>\S+)")
_FLOAT2 = re.compile(r"-?\d+\.\d{2}")
_NOISE = (
    "Conflicting CPU frequency",
    "WARNING",
    "Warning",
    "libibverbs:",
    "Requested SQ size",
    "Current TX depth",
    "Disabling dynamic polling",
    "CPU Frequency is not max",
)
# Bytes per unit, times 8 bits, in Gb (1e9 bits).
_UNIT_TO_GBPS = {
    "Gb/sec": 1.0,
    "MB/sec": 1048576 * 8 / 1e9,
    "MiB/sec": 1048576 * 8 / 1e9,
}


class PerftestBanner(Model):
    """Facts from the run banner; ``fields`` keeps every ``key : value`` pair verbatim."""

    test: str | None = None
    device: str | None = None
    transport_type: str | None = None
    connection_type: str | None = None
    link_type: str | None = None  # Ethernet = RoCE
    gid_index: int | None = None
    mtu_bytes: int | None = None
    num_qps: int | None = None
    rdma_cm: bool | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    local_addresses: list[str] = Field(default_factory=list)
    remote_addresses: list[str] = Field(default_factory=list)
    gids: list[str] = Field(default_factory=list)


class BandwidthRow(Model):
    """One message size of a BW test, in Gb/s whatever unit was printed."""

    line: int
    bytes: int
    iterations: int
    bw_peak_gbps: float  # 0.0 in duration (-D) mode: peak is not measured
    bw_average_gbps: float
    msg_rate_mpps: float
    extra: list[float] = Field(default_factory=list)  # CPU_Util, per-port columns


class LatencyRow(Model):
    """One message size of a latency test (µs). Duration mode prints only t_avg and tps."""

    line: int
    bytes: int
    iterations: int
    t_min_us: float | None = None
    t_max_us: float | None = None
    t_typical_us: float | None = None
    t_avg_us: float
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None
    tps_average: float | None = None


class PerftestRun(Model):
    """One banner + one result table."""

    kind: Literal["bw", "lat"] | None = None
    unit: str | None = None  # BW unit as printed (MB/sec, MiB/sec, Gb/sec)
    banner: PerftestBanner = Field(default_factory=PerftestBanner)
    bandwidth: list[BandwidthRow] = Field(default_factory=list)
    latency: list[LatencyRow] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    truncated_line: str | None = None

    def latency_result(self) -> LatencyResult:
        """The largest-size latency row as a :class:`LatencyResult` (t_typical = median)."""
        if not self.latency:
            raise ParseError(f"{TOOL}: run has no latency rows")
        r = self.latency[-1]
        return LatencyResult(
            count=r.iterations,
            p50_us=r.t_typical_us if r.t_typical_us is not None else r.t_avg_us,
            p99_us=r.p99_us if r.p99_us is not None else r.t_avg_us,
            p999_us=r.p999_us if r.p999_us is not None else r.t_avg_us,
            max_us=r.t_max_us if r.t_max_us is not None else r.t_avg_us,
            mean_us=r.t_avg_us,
        )


class PerftestResult(Model):
    """Every run found in the capture, in order."""

    runs: list[PerftestRun]

    @property
    def run(self) -> PerftestRun:
        """The last run (a single-run capture's only run)."""
        return self.runs[-1]


def _banner_pairs(line: str) -> list[tuple[str, str]]:
    line = re.sub(r"\s*\t+\s*:", " :", line.strip())
    parts = re.split(r"\t+|(?<=\S)\s{2,}(?=[A-Za-z][^:]*?:)", line)
    out = []
    for part in parts:
        m = re.match(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$", part)
        if m and m.group(1):
            out.append((m.group(1), m.group(2)))
    return out


def _apply_banner(fields: dict[str, str]) -> dict:
    def num(key: str) -> int | None:
        v = fields.get(key)
        m = re.match(r"\d+", v or "")
        return int(m.group(0)) if m else None

    return {
        "device": fields.get("Device"),
        "transport_type": fields.get("Transport type"),
        "connection_type": fields.get("Connection type"),
        "link_type": fields.get("Link type"),
        "gid_index": num("GID index"),
        "mtu_bytes": num("Mtu"),
        "num_qps": num("Number of qps"),
        "rdma_cm": (fields["rdma_cm QPs"] == "ON") if "rdma_cm QPs" in fields else None,
    }


def _bw_row(lineno: int, line: str, unit: str) -> BandwidthRow:
    tokens = line.split()
    if len(tokens) < 5:
        raise fail(TOOL, lineno, line, f"bandwidth row has {len(tokens)} fields, expected 5")
    try:
        factor = _UNIT_TO_GBPS[unit]
        return BandwidthRow(
            line=lineno,
            bytes=int(tokens[0]),
            iterations=int(tokens[1]),
            bw_peak_gbps=float(tokens[2]) * factor,
            bw_average_gbps=float(tokens[3]) * factor,
            msg_rate_mpps=float(tokens[4]),
            extra=[float(t) for t in tokens[5:]],
        )
    except ValueError as exc:
        raise fail(TOOL, lineno, line, f"bad bandwidth row ({exc})") from None


def _lat_row(lineno: int, line: str, duration_mode: bool) -> LatencyRow:
    m = re.match(r"^\s*(\d+)\s+(\d+)\s+(.*)$", line)
    if not m:
        raise fail(TOOL, lineno, line, "latency row must start with #bytes #iterations")
    rest = m.group(3)
    if duration_mode:
        tokens = rest.split()
        if len(tokens) != 2:
            raise fail(TOOL, lineno, line, "duration-mode latency row needs t_avg and tps")
        try:
            return LatencyRow(
                line=lineno,
                bytes=int(m.group(1)),
                iterations=int(m.group(2)),
                t_avg_us=float(tokens[0]),
                tps_average=float(tokens[1]),
            )
        except ValueError as exc:
            raise fail(TOOL, lineno, line, f"bad latency row ({exc})") from None
    values = _FLOAT2.findall(rest)
    leftover = _FLOAT2.sub(" ", rest).strip()
    if leftover or len(values) != 7:
        raise fail(TOOL, lineno, line, f"latency row needs 7 values with 2 decimals, got {values}")
    v = [float(x) for x in values]
    return LatencyRow(
        line=lineno,
        bytes=int(m.group(1)),
        iterations=int(m.group(2)),
        t_min_us=v[0],
        t_max_us=v[1],
        t_typical_us=v[2],
        t_avg_us=v[3],
        t_stdev_us=v[4],
        p99_us=v[5],
        p999_us=v[6],
    )


def parse_perftest(text: str, *, allow_truncated: bool = False) -> PerftestResult:
    """Parse one or more perftest runs.

    Between the column header and the closing dashes only data rows and known noise lines
    (CPU-frequency and verbs warnings) are allowed. Without ``allow_truncated`` every table
    must have at least one complete row.
    """
    lines = numbered(text)
    last = max((n for n, ln in lines if ln.strip()), default=0)
    runs: list[dict] = []

    def new_run() -> dict:
        run: dict = {
            "banner": {"fields": {}, "local_addresses": [], "remote_addresses": [], "gids": []},
            "bandwidth": [],
            "latency": [],
            "warnings": [],
        }
        runs.append(run)
        return run

    cur: dict | None = None
    table: str | None = None  # "bw", "lat", "lat-D" while inside a result table
    for lineno, line in lines:
        s = line.strip()
        if not s:
            continue
        if table is not None:
            assert cur is not None
            if _DASHES.match(s):
                table = None
                continue
            if _ROW.match(s):
                try:
                    if table == "bw":
                        cur["bandwidth"].append(_bw_row(lineno, line, cur["unit"]))
                    else:
                        cur["latency"].append(_lat_row(lineno, line, table == "lat-D"))
                except ParseError:
                    if allow_truncated and lineno == last:
                        cur["truncated_line"] = s
                        continue
                    raise
                continue
            if any(s.startswith(n) for n in _NOISE):
                cur["warnings"].append(s)
                continue
            if allow_truncated and lineno == last:
                cur["truncated_line"] = s
                continue
            raise fail(TOOL, lineno, line, "unexpected line inside the result table")
        if m := _TITLE.match(s):
            cur = new_run()
            cur["banner"]["test"] = m.group("title")
            continue
        if m := _BW_HDR.search(s):
            if cur is None or cur["bandwidth"] or cur["latency"]:
                cur = new_run()
            unit = m.group("unit")
            if unit not in _UNIT_TO_GBPS:
                raise fail(TOOL, lineno, line, f"unknown bandwidth unit {unit!r}")
            cur["kind"], cur["unit"], table = "bw", unit, "bw"
            cur["_header"] = (lineno, line)
            continue
        if _LAT_HDR.search(s):
            if cur is None or cur["bandwidth"] or cur["latency"]:
                cur = new_run()
            cur["kind"] = "lat"
            cur["_header"] = (lineno, line)
            table = "lat" if "t_min" in s else "lat-D"
            continue
        if s.startswith("#bytes"):
            if allow_truncated and lineno == last:
                if cur is None:
                    cur = new_run()
                cur["truncated_line"] = s
                continue
            raise fail(TOOL, lineno, line, "unknown result table header")
        if cur is not None and (cur["bandwidth"] or cur["latency"]):
            cur = None  # anything after a finished table belongs to the next run
        if m := _ADDR.match(s):
            cur = cur or new_run()
            cur["banner"][f"{m.group('side')}_addresses"].append(m.group("rest").strip())
            continue
        if m := _GID.match(s):
            cur = cur or new_run()
            cur["banner"]["gids"].append(m.group("gid"))
            continue
        if " : " in s or re.search(r"\S\s*:\s+\S", s) and not s.startswith(("#", "*")):
            pairs = _banner_pairs(s)
            if pairs and all(re.fullmatch(r"[A-Za-z][\w .*/()-]*", k) for k, _ in pairs):
                cur = cur or new_run()
                cur["banner"]["fields"].update(dict(pairs))
                continue
        # Prompts, "Waiting for client to connect", separators: not part of a run.
    results = []
    for run in runs:
        header = run.pop("_header", None)
        if header and not allow_truncated and not run["bandwidth"] and not run["latency"]:
            hline, htext = header
            raise fail(
                TOOL, hline, htext, "result table without a data row (truncated or failed?)"
            )
        fields = run["banner"]["fields"]
        run["banner"].update(_apply_banner(fields))
        results.append(PerftestRun(**{**run, "banner": PerftestBanner(**run["banner"])}))
    tables = [r for r in results if r.kind is not None]
    if not tables and not (allow_truncated and results):
        raise fail_empty(TOOL, text, "no perftest result table found")
    return PerftestResult(runs=[r for r in results if r.kind is not None or allow_truncated])
