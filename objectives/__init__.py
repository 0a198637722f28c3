"""Measurements, parsers of real tool output, and scoring. Depends on numpy and pydantic only
(plus the leaf modules ``tuner.errors`` and ``tuner.settings``)."""

from __future__ import annotations

from objectives.measurement import (
    CollectiveResult,
    Counters,
    LatencyResult,
    Measurement,
)

__all__ = ["CollectiveResult", "Counters", "LatencyResult", "Measurement"]
