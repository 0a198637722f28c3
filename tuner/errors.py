"""One exception hierarchy for the whole project.

The library raises; only the CLI prints and picks exit codes (see ``tuner.cli``).
"""

from __future__ import annotations


class TunerError(Exception):
    """Root of every error ecntune raises on purpose."""


class ConfigError(TunerError):
    """An experiment or inventory file is malformed or contradictory (CLI exit code 2)."""


class ParseError(TunerError):
    """Tool output could not be parsed; the message quotes the offending line."""


class ApplyError(TunerError):
    """Settings could not be applied (or read back identical) on every target."""


class MeasurementError(TunerError):
    """A measurement failed: timeout, NCCL WARN, nonzero #wrong, unparsable output."""


class ProtectionLost(MeasurementError):
    """Mid-trial, the change stopped being this tuner's alone: its dead-man timer was claimed
    (``disarmed`` by a ``recover`` elsewhere) or the target's lock changed hands. The numbers
    may be of anything: the trial fails (``failed:protection_lost``), never scored."""


class SafetyAbort(TunerError):
    """A safety limit was crossed; ``reason`` is a short machine-friendly verdict."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class RollbackError(TunerError):
    """The canary could not be brought back to its baseline: stop everything (exit code 4)."""


class NoWinner(TunerError):
    """The study has no confirmed winner to act on (``export``: CLI exit code 3)."""
