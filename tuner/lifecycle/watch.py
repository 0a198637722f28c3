"""``watch``: sample the counters of production targets and compare with the tuned profile.

Read-only by construction: a source only ever reads counters (``Cluster.counters`` or the
drivers' ``counters``); nothing here calls ``apply``/``write``. Sources:

* ``SshSource``: the hosts and switches of an inventory group, read at a low rate (``wait``
  sleeps; the production traffic is whatever runs);
* ``SimSource``: a rocesim fabric has no traffic of its own, so each interval *is* one run of
  the given production workload under the deployed settings (fresh seeds per interval), its
  clock the simulated one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from tuner.lifecycle.profile import LATENCY_FEATURE, TrafficProfile, features

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.cluster.sim import SimCluster
    from tuner.lifecycle.fleet import Fleet
    from tuner.settings import Settings
    from tuner.workload import ProbePart, Workload


class CounterSource(Protocol):
    """Where ``watch`` reads counters: ``read`` cumulative counters (and the last probe p99,
    or None without a probe); ``wait`` lets one interval of traffic pass."""

    name: str

    def read(self) -> tuple[Counters, float | None]: ...

    def wait(self, interval_s: float) -> None: ...


class SimSource:
    """A rocesim canary carrying ``workload`` as its production traffic.

    ``settings`` (the deployed ones) are put on the canary first; run ``i`` is replicate
    ``first_seed + i`` (its own seed), so two windows of the same mix are independent draws,
    not replays.
    """

    def __init__(self, cluster: SimCluster, workload: Workload,
                 settings: Settings | None = None, first_seed: int = 0) -> None:
        self.cluster = cluster
        self.workload = workload
        self.name = f"sim:{cluster.name}"
        if settings is not None:
            cluster.apply(settings)
        self._next = int(first_seed)  # the replicate (seed) of the next run
        self._p99: float | None = None

    def read(self) -> tuple[Counters, float | None]:
        return self.cluster.counters(), self._p99

    def wait(self, interval_s: float) -> None:
        m = self.cluster.measure(self.workload, replicate=self._next)
        self._next += 1
        self._p99 = m.latency.p99_us if m.latency is not None else None


class SshSource:
    """The counters of a fleet group over SSH; ``wait`` sleeps. With ``probe`` each interval
    ends with one ``ib_write_lat`` run between the inventory's latency hosts (both must be in
    the group): latency under whatever production traffic runs."""

    def __init__(self, fleet: Fleet, probe: ProbePart | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.fleet = fleet
        self.name = f"ssh:{fleet.group}"
        self.probe = probe
        self._sleep = sleep
        self._p99: float | None = None
        if probe is not None:
            from tuner.errors import ConfigError

            inv = fleet.inventory
            pair = inv.launcher.latency_hosts or [h.name for h in inv.hosts[:2]]
            outside = [h for h in pair if h not in {x.name for x in fleet.hosts}]
            if outside:
                raise ConfigError(f"--probe: latency hosts {outside} are not in group "
                                  f"{fleet.group!r}")

    def read(self) -> tuple[Counters, float | None]:
        return self.fleet.counters(), self._p99

    def wait(self, interval_s: float) -> None:
        self._sleep(interval_s)
        if self.probe is not None:
            from tuner.workload import Workload

            m = self.fleet.cluster().measure(Workload(parts=[self.probe], time_limit_s=60))
            self._p99 = m.latency.p99_us if m.latency is not None else None


def sample(source: CounterSource, intervals: int, interval_s: float, priority: int = 3,
           queue: int = 3, ports: list[str] | None = None,
           on_interval: Callable[[int, dict[str, float]], None] | None = None,
           ) -> tuple[list[dict[str, float]], float]:
    """Feature rates of ``intervals`` consecutive intervals, and their mean length in seconds.

    One read before the first interval, one after each: ``intervals + 1`` reads.
    """
    prev, _ = source.read()
    if not prev.ports:  # a fresh simulated fabric has no counters yet: one warm-up interval
        source.wait(interval_s)
        prev, _ = source.read()
    rows: list[dict[str, float]] = []
    lengths: list[float] = []
    for i in range(intervals):
        source.wait(interval_s)
        now, p99 = source.read()
        dt = now.taken_at_s - prev.taken_at_s
        row = features(now.delta(prev), dt, priority, queue, ports)
        if p99 is not None:
            row[LATENCY_FEATURE] = p99
        rows.append(row)
        lengths.append(dt)
        prev = now
        if on_interval is not None:
            on_interval(i, row)
    return rows, sum(lengths) / len(lengths) if lengths else interval_s


def common(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    """Features every interval measured, as columns."""
    keys = set(rows[0]) if rows else set()
    for r in rows[1:]:
        keys &= set(r)
    return {k: [r[k] for r in rows] for k in sorted(keys)}


def record(source: CounterSource, intervals: int, interval_s: float, *, study: str,
           settings: dict[str, int], priority: int = 3, queue: int = 3,
           ports: list[str] | None = None) -> TrafficProfile:
    """Sample and wrap as a profile (what a study stores with its deployed settings)."""
    rows, mean_s = sample(source, intervals, interval_s, priority, queue, ports)
    seen = sorted(ports) if ports is not None else sorted(
        {p for p, _ in source.read()[0].ports.items()})
    return TrafficProfile(study=study, source=source.name, ports=seen, priority=priority,
                          lossless_queue=queue, interval_s=mean_s, settings=settings,
                          samples=common(rows))
