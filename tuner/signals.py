"""SIGINT/SIGTERM as a flag the trial loop checks, and the monitor wrapper that checks it.

The first signal only sets the flag: the running measurement stops at its next monitor poll and
the canary is restored before ``Interrupted`` is raised. A second signal raises at once, except
while a restore runs (``shield``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.cluster.base import Monitor


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the study (the canary was restored first)."""

    def __init__(self, signame: str) -> None:
        super().__init__(f"{signame} received; canary restored")
        self.signame = signame


class SignalGuard:
    """Turns SIGINT/SIGTERM into a flag the loop checks (a second signal raises at once)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.shielded = False
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handler(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        first = self.received is None
        if first:
            self.received = name
        if not first and not self.shielded:
            raise Interrupted(name)

    def check(self) -> None:
        if self.received is not None:
            raise Interrupted(self.received)

    @contextmanager
    def shield(self) -> Iterator[None]:
        prev, self.shielded = self.shielded, True
        try:
            yield
        finally:
            self.shielded = prev


class GuardedMonitor:
    """Wraps the live safety monitor so a pending signal stops the measurement at its poll."""

    def __init__(self, inner: Monitor | None, guard: SignalGuard, interval_s: float) -> None:
        self.inner = inner
        self.guard = guard
        self.interval_s = inner.interval_s if inner is not None else interval_s

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.guard.check()
        if self.inner is not None:
            self.inner.poll(counters, elapsed_s)
