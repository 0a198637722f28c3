"""Parser for ``mlnx_qos -i <if>`` (Mellanox mlnx-tools), with TAB or space indentation.

Output format from mlnx-tools python/mlnx_qos L294-366: ``DCBX mode``, ``Priority trust state``,
``dscp2prio mapping`` (``prio:N dscp:..,..,``), ``Receive buffer size (bytes): a,b,...,
max_buffer_size=N``, ``Cable len``, ``PFC configuration`` (priority/enabled/buffer rows) and
``tc: N ratelimit: ..., tsa: ..., bw: N%`` followed by its ``priority:  N`` lines.
Every section is optional (partial outputs and helper scripts print subsets).
"""

from __future__ import annotations

import re

from pydantic import Field

from objectives.parsers._common import Model, fail, fail_empty, is_prompt, numbered

TOOL = "mlnx_qos"
_DSCP_ROW = re.compile(r"^prio:(?P<prio>\d)\s+dscp:(?P<list>[\d,]*)$")
_TC = re.compile(
    r"^tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?P<rl>[^,]+?),\s*tsa:\s*(?P<tsa>\w+)"
    r"(?:,\s*bw:\s*(?P<bw>\d+)%)?\s*$"
)
_TC_PRIO = re.compile(r"^priority:\s*(?P<p>\d)$")


class TrafficClass(Model):
    """One ``tc:`` block (ETS settings and the priorities mapped to it)."""

    tc: int
    ratelimit: str  # "unlimited" or a rate as printed
    tsa: str  # ets, strict, vendor
    bw_percent: int | None = None
    priorities: list[int] = Field(default_factory=list)


class MlnxQos(Model):
    """Parsed ``mlnx_qos`` show output; absent sections stay ``None``/empty."""

    dcbx_mode: str | None = None  # "Firmware controlled" / "OS controlled"
    trust: str | None = None  # pcp or dscp
    dscp2prio: dict[int, int] = Field(default_factory=dict)  # dscp -> priority
    buffer_size_bytes: list[int] = Field(default_factory=list)
    max_buffer_size_bytes: int | None = None
    cable_len_m: int | None = None
    pfc_enabled: list[bool] = Field(default_factory=list)  # index = priority 0..7
    prio2buffer: list[int] = Field(default_factory=list)
    tcs: list[TrafficClass] = Field(default_factory=list)

    @property
    def prio_tc(self) -> dict[int, int]:
        """priority -> traffic class, from the ``tc:`` blocks."""
        return {p: tc.tc for tc in self.tcs for p in tc.priorities}

    @property
    def pfc_priorities(self) -> list[int]:
        """Priorities with PFC enabled."""
        return [p for p, on in enumerate(self.pfc_enabled) if on]


def _ints(tool_line: tuple[int, str], cells: list[str]) -> list[int]:
    lineno, line = tool_line
    try:
        return [int(c) for c in cells]
    except ValueError:
        raise fail(TOOL, lineno, line, "expected integers") from None


def parse_mlnx_qos(text: str) -> MlnxQos:
    """Parse ``mlnx_qos -i <if>`` show output (see module doc)."""
    data: dict = {"dscp2prio": {}, "tcs": []}
    section = None
    tc: dict | None = None
    found = False
    for lineno, line in numbered(text):
        s = line.strip()
        if not s or is_prompt(line) or s.startswith("#"):
            continue
        if s.startswith("DCBX mode:"):
            data["dcbx_mode"], section = s.split(":", 1)[1].strip(), None
        elif s.startswith("Priority trust state:"):
            data["trust"], section = s.split(":", 1)[1].strip(), None
        elif s == "dscp2prio mapping:":
            section = "dscp"
        elif s.startswith("Receive buffer size (bytes):"):
            section = None
            sizes = []
            for cell in s.split(":", 1)[1].strip().strip(",").split(","):
                cell = cell.strip()
                if cell.startswith("max_buffer_size="):
                    data["max_buffer_size_bytes"] = _ints((lineno, line), [cell.split("=")[1]])[0]
                elif cell:
                    sizes.append(cell)
            data["buffer_size_bytes"] = _ints((lineno, line), sizes)
        elif s.startswith("Cable len:"):
            data["cable_len_m"] = _ints((lineno, line), [s.split(":", 1)[1].strip()])[0]
            section = None
        elif s == "PFC configuration:":
            section = "pfc"
        elif m := _TC.match(s):
            section = "tc"
            tc = {
                "tc": int(m.group("tc")),
                "ratelimit": m.group("rl").strip(),
                "tsa": m.group("tsa"),
                "bw_percent": int(m.group("bw")) if m.group("bw") else None,
                "priorities": [],
            }
            data["tcs"].append(tc)
        elif section == "dscp" and (m := _DSCP_ROW.match(s)):
            for d in filter(None, m.group("list").split(",")):
                data["dscp2prio"][int(d)] = int(m.group("prio"))
        elif section == "pfc" and s.split()[0] in ("priority", "enabled", "buffer"):
            head, *cells = s.split()
            values = _ints((lineno, line), cells)
            if len(values) != 8:
                raise fail(TOOL, lineno, line, f"expected 8 priorities, got {len(values)}")
            if head == "enabled":
                data["pfc_enabled"] = [bool(v) for v in values]
            elif head == "buffer":
                data["prio2buffer"] = values
            elif values != list(range(8)):
                raise fail(TOOL, lineno, line, "priority header must be 0..7")
        elif section == "tc" and tc is not None and (m := _TC_PRIO.match(s)):
            tc["priorities"].append(int(m.group("p")))
        else:
            raise fail(TOOL, lineno, line, "unexpected line in mlnx_qos output")
        found = True
    if not found:
        raise fail_empty(TOOL, text, "no mlnx_qos output found")
    data["tcs"] = [TrafficClass(**t) for t in data["tcs"]]
    return MlnxQos(**data)
