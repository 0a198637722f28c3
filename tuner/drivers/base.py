"""One small interface for every device the SSH backend changes (NAPALM-style).

A driver wraps one target's connection and knows one platform's commands::

    drv.read()      -> EcnSettings | DcqcnSettings   # never changes anything
    drv.write(s)    -> the settings held before      # sets s, reads back, compares
    drv.counters()  -> {"host0/mlx5_0": {"rx_prio3_pause": 12, ...}}   # absent != 0

``write`` is ONE remote command: read the current state, write only what differs, read back
(``<read> && echo MARK && <writes> && echo MARK && <read>``). Which fields differ is computed
from the last state this driver read (``known``); the state printed at the start of the same
command is what ``write`` returns and what a rollback restores, so a stale ``known`` can make a
write incomplete (caught by the read-back) but never makes a rollback wrong.

A new platform (Arista EOS, say) is one new module: a ``Driver`` subclass with
``read_command``, ``parse``, ``write_steps``, ``counters``. Drivers raise ``WriteError`` (an
``ApplyError``: refused value, read-back mismatch) or ``SshError`` (transport).
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from tuner.errors import ApplyError, TunerError
from tuner.settings import DcqcnSettings, EcnSettings

if TYPE_CHECKING:
    from tuner.ssh.transport import Result

S = TypeVar("S", EcnSettings, DcqcnSettings)
BEFORE, AFTER = "==ecntune:before-write==", "==ecntune:after-write=="  # shell-safe


class Runner(Protocol):
    """What a driver needs from a connection (``tuner.ssh.transport.Connection``)."""

    @property
    def name(self) -> str: ...

    def run(self, command: str, *, timeout_s: float | None = None, check: bool = True,
            sudo: bool | None = None, retry_dropped: bool = True) -> Result: ...


class WriteError(ApplyError):
    """A write failed; ``before`` is what the device held before it (None if unknown)."""

    def __init__(self, message: str, before: object | None) -> None:
        super().__init__(message)
        self.before = before


class Driver(ABC, Generic[S]):
    """Read, write and count one device. ``target`` is the Settings/Counters key."""

    platform: str = ""

    def __init__(self, runner: Runner, target: str) -> None:
        self.runner = runner
        self.target = target
        self.known: S | None = None  # the last state read from the device

    # -- what a platform module provides ----------------------------------------------
    @abstractmethod
    def read_command(self) -> str:
        """One command printing the current settings."""

    @abstractmethod
    def parse(self, text: str) -> S:
        """Settings from the output of ``read_command``; raises ``ApplyError``."""

    @abstractmethod
    def write_steps(self, current: S, settings: S) -> list[str]:
        """Commands taking ``current`` to ``settings`` (run after ``read_command``, same
        shell, joined with ``&&``); empty when nothing differs."""

    @abstractmethod
    def counters(self) -> dict[str, dict[str, int]]:
        """Cumulative counters per port key; a counter the device lacks is left out.

        Example: ``{"leaf0/Ethernet0": {"pfc3_rx_pkts": 0, "queue3_ecn_marked_pkts": 12}}``.
        """

    # -- shared logic ---------------------------------------------------------------------
    def read(self) -> S:
        """The device's current settings, read from the device itself.

        Example: ``EcnSettings(kmin_bytes=1048576, kmax_bytes=2097152, pmax_percent=5)``.
        """
        self.known = None
        self.known = self.parse(self.runner.run(self.read_command()).stdout)
        return self.known

    def needs_write(self, current: S, settings: S) -> bool:
        """Whether ``write`` has anything to do (a platform may hold equal values in the wrong
        place: a switch canary profile that must give way to the original)."""
        return current != settings

    def write_command(self, current: S, settings: S) -> str:
        """The single command of ``write``: read, mark, write what differs, mark, read."""
        steps: list[str] = self.write_steps(current, settings)
        read = self.read_command()
        return " && ".join([read, f"echo {shlex.quote(BEFORE)}", *steps,
                            f"echo {shlex.quote(AFTER)}", read])

    def write(self, settings: S) -> S:
        """Set ``settings``; return the settings held before. Raises ``WriteError``."""
        current = self.known if self.known is not None else self.read()
        if not self.needs_write(current, settings):
            current = self.read()  # confirm on the device: nothing to write?
            if not self.needs_write(current, settings):
                return current
        self.known = None
        try:
            res = self.runner.run(self.write_command(current, settings), check=False)
        except TunerError as exc:
            if getattr(exc, "started", False):  # lost mid-command: it may have changed things
                raise WriteError(f"{self.target}: {exc}", current) from exc
            raise
        head, sep, rest = res.stdout.partition(f"{BEFORE}\n")
        before: S | None = None
        if sep:  # the writes started: what the device held is printed above the mark
            try:
                before = self.parse(head)
            except ApplyError:
                before = current  # unreadable (unlikely: it was read the same way): best known
        if res.status != 0:
            tail = " | ".join(res.stderr.strip().splitlines()[-3:]) or "(no stderr)"
            # Without the first mark the writes never started: nothing changed.
            why = ("timed out (killed on the target)" if res.status in (124, 137)
                   else f"exit status {res.status}")
            raise WriteError(f"{self.target}: write failed ({why}): {tail}", before)
        try:
            after = self.parse(rest.partition(f"{AFTER}\n")[2])
        except ApplyError as exc:
            raise WriteError(f"{self.target}: read-back after write unreadable: {exc}",
                             before) from exc
        self.known = after
        if after != settings:
            diff = {k: (v, getattr(after, k)) for k, v in settings.model_dump().items()
                    if getattr(after, k) != v}
            raise WriteError(f"{self.target}: read-back differs after write (wanted, got): "
                             f"{diff}", before)
        assert before is not None
        return before

    def commands(self) -> list[str]:
        """Every command line this driver may run (for docs and audits)."""
        return []
