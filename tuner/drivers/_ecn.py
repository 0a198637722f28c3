"""Ordering switch ECN writes so the queue is never left with min >= max in between.

Switch CLIs write one field at a time (SONiC ``ecnconfig`` issues one CONFIG_DB write per field
and validates each call against the stored values). When the maximum goes up, write it first: the
intermediate (old min, new max) has old min < old max <= new max. When it goes down, write the
minimum first: the intermediate (new min, old max) has new min < new max < old max.
"""

from __future__ import annotations

from typing import Literal

from tuner.settings import EcnSettings

Field = Literal["kmin_bytes", "kmax_bytes", "pmax_percent"]


def ecn_write_order(current: EcnSettings, target: EcnSettings) -> list[tuple[Field, int]]:
    """The single-field writes that take ``current`` to ``target``, each step valid."""
    steps: list[tuple[Field, int]] = []
    new_min, new_max = target.kmin_bytes, target.kmax_bytes
    max_first = new_max >= current.kmax_bytes
    order: tuple[Field, Field] = ("kmax_bytes", "kmin_bytes") if max_first \
        else ("kmin_bytes", "kmax_bytes")
    for name in order:
        value = new_max if name == "kmax_bytes" else new_min
        if getattr(current, name) != value:
            steps.append((name, value))
    if current.pmax_percent != target.pmax_percent:
        steps.append(("pmax_percent", target.pmax_percent))
    return steps


def states_along(current: EcnSettings, steps: list[tuple[Field, int]]) -> list[tuple[int, int]]:
    """(kmin, kmax) after each step: what a test checks for min < max at every point."""
    kmin, kmax = current.kmin_bytes, current.kmax_bytes
    out = []
    for name, value in steps:
        if name == "kmin_bytes":
            kmin = value
        elif name == "kmax_bytes":
            kmax = value
        out.append((kmin, kmax))
    return out
