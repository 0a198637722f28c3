"""A named group of production targets over SSH: read settings, read counters, run drivers.

The inventory's ``groups:`` name sets of hosts and switches (``all`` is every target). Unlike
the canary backend, a ``Fleet`` never changes anything by itself: ``read_settings`` and
``counters`` only read; promotion and persistence drive the same drivers through ``fan``, one
outcome per target (one bad target never hides the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from objectives.measurement import Counters, timed
from tuner.cluster.base import ClusterDescription
from tuner.cluster.ssh import SshCluster
from tuner.errors import ConfigError, MeasurementError
from tuner.inventory import HostEntry
from tuner.settings import DcqcnSettings, EcnSettings, Settings
from tuner.ssh.placement import varies

if TYPE_CHECKING:
    from collections.abc import Callable

    from tuner.drivers.base import Driver
    from tuner.inventory import Inventory, SwitchEntry
    from tuner.ssh.transport import Outcome, Pool

ALL = "all"


def members(inv: Inventory, group: str) -> list[str]:
    """Target names of ``group`` (``all``: every host and switch); raises naming the groups."""
    if group == ALL:
        return [t.name for t in (*inv.hosts, *inv.switches)]
    if group not in inv.groups:
        have = ", ".join(sorted(inv.groups)) or "none defined"
        raise ConfigError(f"inventory group {group!r} does not exist (groups: {have}; "
                          f"'{ALL}' is every target)")
    return list(inv.groups[group])


class Fleet:
    """The hosts and switches of one inventory group, each behind its platform driver."""

    def __init__(self, inventory: Inventory, group: str = ALL) -> None:
        from tuner.cluster.ssh import endpoints
        from tuner.ssh.transport import Pool

        self.inventory = inventory
        self.group = group
        names = set(members(inventory, group))
        self.hosts: list[HostEntry] = [h for h in inventory.hosts if h.name in names]
        self.switches: list[SwitchEntry] = [s for s in inventory.switches if s.name in names]
        eps = {n: ep for n, ep in endpoints(inventory).items() if n in names}
        self.pool: Pool = Pool(eps, max_connects=inventory.ssh.max_parallel,
                               workers=inventory.ssh.fanout_workers)
        self._drivers: dict[str, Driver[Any]] = {}
        self.nics = [r for h in self.hosts for r in h.rail_entries()]  # one per rail
        self._conn_of = {**{r.nic: r.name for r in self.nics},
                         **{s.name: s.name for s in self.switches}}

    # Settings keys: ``leaf0`` for a switch, ``host0/mlx5_0`` for a NIC (one per rail).
    @property
    def keys(self) -> list[str]:
        return [s.name for s in self.switches] + [r.nic for r in self.nics]

    def entry(self, key: str) -> HostEntry | SwitchEntry:
        for h in self.nics:
            if h.nic == key:
                return h
        for s in self.switches:
            if s.name == key:
                return s
        raise KeyError(key)

    def is_nic(self, key: str) -> bool:
        return any(r.nic == key for r in self.nics)

    def driver(self, key: str) -> Driver[Any]:
        """The platform driver of one target (mlx5 layout detected on first use)."""
        from tuner.drivers import nic_driver, switch_driver

        if key not in self._drivers:
            ent = self.entry(key)
            conn = self.pool[self._conn_of[key]]
            self._drivers[key] = nic_driver(conn, ent) if isinstance(ent, HostEntry) \
                else switch_driver(conn, ent)
        return self._drivers[key]

    def fan(self, fn: Callable[[Driver[Any]], Any], keys: list[str] | None = None,
            ) -> dict[str, Outcome[Any]]:
        """``fn(driver)`` per target in parallel; one outcome per Settings key."""
        from tuner.cluster.ssh import fan_keys

        chosen = self.keys if keys is None else keys
        return fan_keys(self.pool, self._conn_of.__getitem__, lambda k: fn(self.driver(k)),
                        chosen)

    def read_settings(self, keys: list[str] | None = None,
                      ) -> tuple[Settings, dict[str, Exception]]:
        """Live settings of every reachable target, and the error of every other one."""
        res = self.fan(lambda d: d.read(), keys)
        ok = {k: o.value for k, o in res.items() if o.error is None}
        return (Settings(switches={k: v for k, v in ok.items() if isinstance(v, EcnSettings)},
                         nics={k: v for k, v in ok.items() if isinstance(v, DcqcnSettings)}),
                {k: o.error for k, o in res.items() if o.error is not None})

    def counters(self) -> Counters:
        """Cumulative counters of every port of the group; any unreadable target raises."""
        res = self.fan(lambda d: timed(d.counters))
        failed = {k: o.error for k, o in res.items() if o.error is not None}
        if failed:
            raise MeasurementError("counters unreadable on " + "; ".join(
                f"{k}: {e}" for k, e in sorted(failed.items())))
        return Counters.gather(o.value for o in res.values() if o.value is not None)

    def cluster(self, keys: list[str] | None = None) -> SshCluster:
        """The SSH backend over some of the fleet's targets (all by default), sharing its
        connections and drivers: ``apply`` refuses any other target."""
        return FleetCluster(self, self.keys if keys is None else keys)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FleetCluster(SshCluster):
    """``SshCluster`` whose canary is a subset of a fleet (one promotion wave, say)."""

    def __init__(self, fleet: Fleet, keys: list[str]) -> None:
        # Not SshCluster.__init__: the fleet already holds the pool and the drivers.
        self.inventory = fleet.inventory
        self.name = f"{fleet.group}:{len(keys)}"
        self.pool = fleet.pool
        self.keys = list(keys)
        self._drivers = {k: fleet.driver(k) for k in keys}
        self._conn_of = {k: d.runner.name for k, d in self._drivers.items()}
        self._nics = [k for k in keys if fleet.is_nic(k)]
        self._switch_facts = None  # SshCluster's facts cache (read on first use)
        # the fleet's drivers are built from the inventory as written: no sysfs rail check
        self._rails_resolved = True

    def describe(self) -> ClusterDescription:
        # measure() is SshCluster's over the fleet's hosts: its placements are theirs
        return ClusterDescription(name=self.name, backend="ssh",
                                  canary_switches=[k for k in self.keys if k not in self._nics],
                                  canary_nics=list(self._nics),
                                  facts={"placements": "vary" if varies(self.inventory)
                                         else "fixed"})

    def close(self) -> None:
        """The fleet owns the connections."""
