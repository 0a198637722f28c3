"""Parser for ``mlxconfig -d <dev> query`` / ``mstconfig ... query`` (NVCONFIG parameters).

Values print as ``300``, ``True(1)``, ``ECN(0)``, ``_256KB(1)``: the number in parentheses is the
raw value, the text before it the symbolic name. With ``-e`` three columns (Default, Current,
Next Boot) are printed; each is kept. A leading ``*`` marks a changed parameter.
"""

from __future__ import annotations

import re

from pydantic import Field

from objectives.parsers._common import Model, fail, fail_empty, is_prompt, numbered

TOOL = "mlxconfig"
_DEVICE = re.compile(r"^Device #(?P<n>\d+):\s*$")
_FACT = re.compile(r"^(?P<k>Device type|Name|Description|Device|PCI device):\s*(?P<v>.*?)\s*$")
_CONF_HDR = re.compile(r"^Configurations:\s*(?P<cols>.*?)\s*$")
_PARAM = re.compile(
    r"^(?P<star>\*\s*)?(?P<name>[A-Z][A-Za-z0-9_]*(?:\[\d+\])?)\s+(?P<vals>\S.*?)\s*$"
)
_VALUE = re.compile(r"^(?:(?P<sym>[^()\s]*)\((?P<raw>-?\d+)\)|(?P<num>-?\d+)|(?P<other>\S+))$")


class MlxconfigValue(Model):
    """One printed value: ``raw`` is the integer (``True(1)`` -> 1), ``text`` the symbol."""

    text: str
    raw: int | None


class MlxconfigDevice(Model):
    """One ``Device #N`` block."""

    device_type: str | None = None
    name: str | None = None
    description: str | None = None
    device: str | None = None
    columns: list[str] = Field(default_factory=list)  # e.g. ["Next Boot"]
    params: dict[str, list[MlxconfigValue]] = Field(default_factory=dict)
    changed: list[str] = Field(default_factory=list)  # parameters marked with '*'

    def value(self, name: str, column: int = -1) -> int | None:
        """Raw integer of ``name`` (last column = Next Boot by default)."""
        return self.params[name][column].raw


class MlxconfigQuery(Model):
    """All devices of one query."""

    devices: list[MlxconfigDevice]


def _value(token: str) -> MlxconfigValue:
    m = _VALUE.match(token)
    assert m is not None
    if m.group("raw") is not None:
        return MlxconfigValue(text=m.group("sym") or m.group("raw"), raw=int(m.group("raw")))
    if m.group("num") is not None:
        return MlxconfigValue(text=m.group("num"), raw=int(m.group("num")))
    return MlxconfigValue(text=token, raw=None)


def parse_mlxconfig_query(text: str) -> MlxconfigQuery:
    """Parse ``mlxconfig``/``mstconfig`` query output (one or more devices)."""
    devices: list[dict] = []
    cur: dict | None = None
    in_conf = False
    for lineno, line in numbered(text):
        s = line.strip()
        if not s or set(s) == {"-"} or is_prompt(line) or s.startswith("#"):
            continue
        if _DEVICE.match(s):
            cur = {"params": {}, "changed": [], "columns": []}
            devices.append(cur)
            in_conf = False
            continue
        if cur is None:
            if s.startswith(("Querying", "Device type", "Note")):
                cur = {"params": {}, "changed": [], "columns": []}
                devices.append(cur)
            else:
                raise fail(TOOL, lineno, line, "expected 'Device #N:'")
        if m := _CONF_HDR.match(s):
            cur["columns"] = re.split(r"\s{2,}", m.group("cols")) if m.group("cols") else []
            in_conf = True
            continue
        if not in_conf and (m := _FACT.match(s)):
            key = {"Device type": "device_type", "PCI device": "device"}.get(
                m.group("k"), m.group("k").lower()
            )
            cur[key] = m.group("v")
            continue
        if in_conf and (m := _PARAM.match(s)):
            values = [_value(t) for t in m.group("vals").split()]
            ncol = len(cur["columns"]) or 1
            if len(values) != ncol:
                raise fail(TOOL, lineno, line, f"expected {ncol} value(s)")
            cur["params"][m.group("name")] = values
            if m.group("star"):
                cur["changed"].append(m.group("name"))
            continue
        if s.startswith(("Querying", "Note:", "The '*'")):
            continue
        raise fail(TOOL, lineno, line, "unexpected line in mlxconfig query output")
    if not devices or not any(d["params"] for d in devices):
        raise fail_empty(TOOL, text, "no configuration parameters found")
    return MlxconfigQuery(devices=[MlxconfigDevice(**d) for d in devices])
