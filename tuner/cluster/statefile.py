"""Device state that outlives the process, for backends whose devices live in memory (``sim``).

Real switches and NICs keep whatever the tuner last wrote when the tuner dies; a simulated fabric
would forget it and quietly come back clean, which would make crash recovery untestable and
``ecntune recover`` meaningless. ``StateFileCluster`` wraps such a backend: every successful
``apply`` writes the canary's settings to ``path`` (atomically, fsync'd). A new process puts
the canary back on those settings before anything else, exactly as a real fabric would still
hold them, when the change journal says a change was left open; with a clean journal the canary
is known to be on its baseline, so the backend's own start state (``current:``) stands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safety.files import write_file
from tuner.cluster.base import Cluster
from tuner.errors import ConfigError
from tuner.settings import Settings

if TYPE_CHECKING:
    from objectives.measurement import Counters, Measurement
    from tuner.cluster.base import ClusterDescription, Monitor
    from tuner.workload import Workload


def read_state(path: str | os.PathLike[str]) -> Settings | None:
    """The settings a previous process left on the canary (``None``: no file)."""
    p = Path(path)
    try:
        return Settings.model_validate(json.loads(p.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{p}: unreadable device state file: {exc}") from None


def write_state(path: str | os.PathLike[str], settings: Settings) -> None:
    """Atomic, durable replace (a crash leaves the old or the new file, never half of one)."""
    write_file(path, settings.model_dump_json())  # unpredictable temporary name, rename


class StateFileCluster(Cluster):
    """``inner`` with its canary settings persisted in ``path`` (see the module docstring)."""

    def __init__(self, inner: Cluster, path: str | os.PathLike[str],
                 journal: str | os.PathLike[str] | None = None) -> None:
        from safety.journal import Journal

        self.inner = inner
        self.path = Path(path)
        left = read_state(self.path)
        dirty = journal is None or Journal(journal).possibly_open()
        if left is not None and dirty:
            self.inner.apply(left)  # the devices still hold what the last process wrote

    def describe(self) -> ClusterDescription:
        return self.inner.describe()

    def snapshot(self) -> Settings:
        return self.inner.snapshot()

    def apply(self, settings: Settings) -> None:
        try:
            self.inner.apply(settings)
        finally:  # all-or-nothing inside; record whatever the canary holds now
            write_state(self.path, self.inner.read_back())

    def read_back(self) -> Settings:
        return self.inner.read_back()

    def counters(self) -> Counters:
        return self.inner.counters()

    def measure(self, workload: Workload, monitor: Monitor | None = None, *,
                replicate: int = 0) -> Measurement:
        return self.inner.measure(workload, monitor, replicate=replicate)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # backend extras (``read_all`` of the sim)
        return getattr(self.inner, name)
