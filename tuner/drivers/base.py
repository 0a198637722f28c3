"""One small interface for every device the SSH backend changes (NAPALM-style).

A driver wraps one target's connection and knows one platform's commands::

    drv.read()      -> EcnSettings | DcqcnSettings   # never changes anything
    drv.write(s)                                     # sets s, then reads back and compares
    drv.counters()  -> {"host0/mlx5_0": {"rx_prio3_pause": 12, ...}}   # absent != 0

A new platform (Arista EOS, say) is one new module with one ``Driver`` subclass. Drivers raise
``ApplyError`` (write/read-back mismatch, refused value) or ``SshError`` (transport).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from tuner.settings import DcqcnSettings, EcnSettings

if TYPE_CHECKING:
    from tuner.ssh.transport import Result

S = TypeVar("S", EcnSettings, DcqcnSettings)


class Runner(Protocol):
    """What a driver needs from a connection (``tuner.ssh.transport.Connection``)."""

    name: str

    def run(self, command: str, *, timeout_s: float | None = None, check: bool = True,
            sudo: bool | None = None, retry_dropped: bool = True) -> Result: ...


class Driver(ABC, Generic[S]):
    """Read, write and count one device. ``target`` is the Settings/Counters key."""

    platform: str = ""

    def __init__(self, runner: Runner, target: str) -> None:
        self.runner = runner
        self.target = target

    @abstractmethod
    def read(self) -> S:
        """The device's current settings, read from the device itself.

        Example: ``EcnSettings(kmin_bytes=1048576, kmax_bytes=2097152, pmax_percent=5)``.
        """

    @abstractmethod
    def write(self, settings: S) -> None:
        """Set ``settings``; raises ``ApplyError`` if the read-back differs."""

    @abstractmethod
    def counters(self) -> dict[str, dict[str, int]]:
        """Cumulative counters per port key; a counter the device lacks is left out.

        Example: ``{"leaf0/Ethernet0": {"pfc3_rx_pkts": 0, "queue3_ecn_marked_pkts": 12}}``.
        """

    def commands(self) -> list[str]:
        """Every command line this driver may run (for docs and audits)."""
        return []
