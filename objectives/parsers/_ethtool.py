"""Parsers for ``ethtool -S <if>`` (whole or grep'ed) and ``ethtool -i <if>``.

Counter names are kept exactly as the driver prints them, except that the trailing space of the
pre-4.20 mlx5 name ``tx_pause_storm_warning_events `` is stripped. A counter that is not printed
is absent from the result, never 0: mlx5 prints ``rx_prio3_pause`` only while PFC is enabled on
priority 3 (reference/mlx5-ethtool/mlx5-ethtool-counter-names-from-source.txt).
"""

from __future__ import annotations

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

_STAT = re.compile(r"^\s*(?P<name>[^:\s][^:]*?)\s*:\s*(?P<value>-?\d+)\s*$")
_HEADERS = ("NIC statistics:", "PHY statistics:", "Per-queue statistics:")


class EthtoolStats(Model):
    """``ethtool -S``: counter name -> value."""

    counters: dict[str, int] = Field(default_factory=dict)
    truncated_line: str | None = None


class EthtoolInfo(Model):
    """``ethtool -i``: driver facts; ``fields`` keeps every line verbatim."""

    driver: str | None = None
    version: str | None = None
    firmware_version: str | None = None
    bus_info: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)


def parse_ethtool_stats(text: str, *, allow_truncated: bool = False) -> EthtoolStats:
    """Parse ``ethtool -S`` output, or any grep'ed subset of it.

    Skips the ``NIC statistics:`` header, ``#`` comments and captured shell prompts; every other
    line must be ``name: integer``.
    """
    lines = numbered(text)
    last = last_content_line(lines)
    out: dict[str, int] = {}
    truncated = None
    for lineno, line in lines:
        s = line.strip()
        if not s or s.startswith("#") or s in _HEADERS or is_prompt(line):
            continue
        m = _STAT.match(line)
        if m is None:
            if allow_truncated and lineno == last:
                truncated = s
                continue
            raise fail("ethtool -S", lineno, line, "expected 'name: integer'")
        out[m.group("name").strip()] = int(m.group("value"))
    if not out:
        raise fail_empty("ethtool -S", text, "no counters found")
    return EthtoolStats(counters=out, truncated_line=truncated)


def parse_ethtool_info(text: str) -> EthtoolInfo:
    """Parse ``ethtool -i`` (``driver: mlx5_core``, ``firmware-version: 14.23.1020 (...)``)."""
    fields: dict[str, str] = {}
    for lineno, line in numbered(text):
        s = line.strip()
        if not s or s.startswith("#") or is_prompt(line):
            continue
        key, sep, value = s.partition(":")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9-]*", key):
            raise fail("ethtool -i", lineno, line, "expected 'key: value'")
        fields[key] = value.strip()
    if "driver" not in fields:
        raise fail_empty("ethtool -i", text, "no 'driver:' line")
    return EthtoolInfo(
        driver=fields.get("driver"),
        version=fields.get("version"),
        firmware_version=fields.get("firmware-version"),
        bus_info=fields.get("bus-info"),
        fields=fields,
    )
