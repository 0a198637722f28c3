"""The ``ssh`` Cluster backend: real (or emulated) hosts and switches driven over SSH.

Every target gets one reusable connection (``tuner.ssh.transport.Pool``); every operation fans
out over the targets in a bounded thread pool and collects one outcome per target, so one bad
target never hides the others. ``apply`` is all-or-nothing: each target is read, then written
and read back in one command; if any target fails, every target that was touched is written
back to what it held before, and ``ApplyError`` names the failed and the restored targets (or
``RollbackError`` names those that could not be restored).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from objectives.measurement import Counters, Measurement, timed
from safety.limits import PfcThreshold
from tuner.cluster.base import Cluster, ClusterDescription, Monitor
from tuner.drivers import nic_driver, switch_driver
from tuner.drivers.base import WriteError
from tuner.errors import (
    ApplyError,
    ConfigError,
    MeasurementError,
    RollbackError,
    TunerError,
)
from tuner.pfc_threshold import lowest, switch_threshold
from tuner.settings import DcqcnSettings, EcnSettings, Settings
from tuner.ssh import placement
from tuner.ssh.measure import run_measurement
from tuner.ssh.transport import CommandError, Endpoint, Outcome, Pool, SshError

if TYPE_CHECKING:
    from tuner.drivers.base import Driver
    from tuner.inventory import HostEntry, Inventory
    from tuner.workload import Workload

log = logging.getLogger(__name__)


def endpoints(inv: Inventory) -> dict[str, Endpoint]:
    """Connection parameters of every host and switch of the inventory."""
    o = inv.ssh
    return {
        t.name: Endpoint(
            name=t.name, address=t.address, port=t.port, user=t.user,
            key_file=os.path.expanduser(t.key_file) if t.key_file else None,
            password=t.password, key_passphrase=t.key_passphrase, sudo=t.sudo,
            known_hosts=o.known_hosts, trust_on_first_use=o.trust_on_first_use,
            connect_timeout_s=o.connect_timeout_s, command_timeout_s=o.command_timeout_s,
            connect_retries=o.connect_retries, retry_backoff_s=o.retry_backoff_s)
        for t in (*inv.hosts, *inv.switches)
    }


def fan_keys(pool: Pool, conn_of: Any, fn: Any, keys: list[str]) -> dict[str, Outcome[Any]]:
    """``fn(key)`` for every key: connections (``conn_of(key)``) in parallel, the keys of one
    connection (a host's rails) one after the other; one outcome per key, so a host's eight
    rails are eight outcomes, never one."""
    by_conn: dict[str, list[str]] = {}
    for k in keys:
        by_conn.setdefault(conn_of(k), []).append(k)

    def per_conn(name: str) -> dict[str, Outcome[Any]]:
        out: dict[str, Outcome[Any]] = {}
        for k in by_conn[name]:
            t0 = time.monotonic()
            try:
                out[k] = Outcome(k, value=fn(k), elapsed_s=time.monotonic() - t0)
            except Exception as exc:  # noqa: BLE001 - one bad rail must not hide the others
                out[k] = Outcome(k, error=exc, elapsed_s=time.monotonic() - t0)
        return out

    res = pool.fan_out(lambda c: per_conn(c.name), list(by_conn))
    return {k: (o.value or {}).get(k) or Outcome(k, error=o.error)
            for name, o in res.items() for k in by_conn[name]}


def _failures(outcomes: dict[str, Outcome[Any]]) -> dict[str, Exception]:
    return {name: o.error for name, o in outcomes.items() if o.error is not None}


def _describe_failures(failed: dict[str, Exception]) -> str:
    parts = []
    for name, exc in sorted(failed.items()):
        text = str(exc)
        parts.append(text if text.startswith(f"{name}") else f"{name}: {text}")
    return "; ".join(parts)


class SshCluster(Cluster):
    """A canary of mlx5 hosts and SONiC/NVUE switches described by an ``Inventory``."""

    def __init__(self, inventory: Inventory, *, name: str = "ssh") -> None:
        self.inventory = inventory
        self.name = name
        self.pool = Pool(endpoints(inventory), max_connects=inventory.ssh.max_parallel,
                         workers=inventory.ssh.fanout_workers)
        self._drivers: dict[str, Driver[Any]] | None = None
        self._conn_of: dict[str, str] = {}
        self._switch_facts: dict[str, Outcome[Any]] | None = None
        self._rails_resolved = False

    @classmethod
    def from_fabric(cls, fabric: Any, *, name: str = "ssh") -> SshCluster:
        """From an experiment's ``fabric:`` (``inventory:`` inline or ``inventory_file:``)."""
        from tuner.inventory import load_inventory, parse_inventory

        if fabric.inventory_file is not None:
            path = os.path.expandvars(os.path.expanduser(fabric.inventory_file))
            if "$" in path:
                raise ConfigError(f"fabric.inventory_file: {fabric.inventory_file!r} uses an "
                                  "unset environment variable")
            return cls(load_inventory(path), name=name)
        return cls(parse_inventory(fabric.inventory, "fabric.inventory"), name=name)

    # -- connections and drivers ------------------------------------------------------
    def connect(self) -> None:
        """Open every connection now (cold start); raises naming the targets that failed."""
        failed = _failures(self.pool.connect_all())
        if failed:
            raise ApplyError(f"cannot connect to {sorted(failed)}: "
                             f"{_describe_failures(failed)}")

    def resolve_rails(self, *, skip_unreachable: bool = False) -> None:
        """Check every host's rails against its sysfs once (devices, netdevs, PCI addresses,
        the GID index of each data address) and keep the inventory with what was read; a
        rail that disagrees raises ``ConfigError`` before anything is written.
        ``skip_unreachable`` (pre-flight): a host that cannot be reached is left to the check
        that reports it (exit 2 naming its address), and the rails are read again next time."""
        if self._rails_resolved:
            return
        from tuner.ssh import rails

        inv = self.inventory
        hosts = {h.name: h for h in inv.hosts}
        # sysfs reads need no root: never under sudo
        read = self.pool.fan_out(
            lambda c: rails.resolve(hosts[c.name], c.run(rails.command(hosts[c.name]),
                                                         check=False, sudo=False).stdout),
            list(hosts))
        bad = {n: o.error for n, o in read.items() if isinstance(o.error, ConfigError)}
        if bad:
            raise ConfigError("\n".join(str(e) for _, e in sorted(bad.items())))
        failed = _failures(read)
        unreachable = {n for n, e in failed.items()
                       if isinstance(e, SshError) and not isinstance(e, CommandError)}
        if skip_unreachable and unreachable and set(failed) == unreachable:
            return
        if failed:
            raise ApplyError(f"cannot read the rails of {sorted(failed)}: "
                             f"{_describe_failures(failed)}")
        self.inventory = inv.model_copy(update={"hosts": [
            rails.resolved_host(h, read[h.name].value or []) for h in inv.hosts]})
        self._rails_resolved = True

    def nic_entries(self) -> list[HostEntry]:
        """Every NIC port of the canary: one entry per host rail (Settings key ``.nic``)."""
        return [r for h in self.inventory.hosts for r in h.rail_entries()]

    def drivers(self) -> dict[str, Driver[Any]]:
        """Driver per Settings key (``leaf0``, ``host0/mlx5_0``, one per rail); detects mlx5
        layouts once."""
        if self._drivers is None:
            self.resolve_rails()
            inv = self.inventory
            hosts = {h.name: h for h in inv.hosts}
            made = self.pool.fan_out(
                lambda c: [nic_driver(c, r) for r in hosts[c.name].rail_entries()], list(hosts))
            failed = _failures(made)
            if failed:
                raise ApplyError(f"cannot set up NIC drivers: {_describe_failures(failed)}")
            drivers: dict[str, Driver[Any]] = {}
            for h in inv.hosts:
                for drv in made[h.name].value or []:
                    drivers[drv.target] = drv
                    self._conn_of[drv.target] = h.name
            for s in inv.switches:
                drivers[s.name] = switch_driver(self.pool.conns[s.name], s)
                self._conn_of[s.name] = s.name
            self._drivers = drivers
        return self._drivers

    def _fan(self, fn: Any, keys: list[str]) -> dict[str, Outcome[Any]]:
        """Run ``fn(driver)`` per Settings key, through the pool (one outcome per key)."""
        drivers = self.drivers()
        # Switches first: their CLIs are the slow path, so they should not queue behind hosts.
        nics = {r.nic for r in self.nic_entries()}
        return fan_keys(self.pool, self._conn_of.__getitem__, lambda k: fn(drivers[k]),
                        sorted(keys, key=lambda k: k in nics))

    # -- Cluster ------------------------------------------------------------------------
    def switch_facts(self, refresh: bool = False) -> dict[str, Outcome[Any]]:
        """Per switch, read once: the PFC threshold inputs, counter poll intervals and the
        configuration the blast radius is computed from (``driver.facts()``)."""
        if self._switch_facts is None or refresh:
            # the switches' own drivers only: a host that cannot be reached must not stop this
            sws = {s.name: s for s in self.inventory.switches}
            self._switch_facts = self.pool.fan_out(
                lambda c: switch_driver(c, sws[c.name]).facts(), list(sws)) if sws else {}
        return self._switch_facts

    def pfc_threshold(self) -> tuple[PfcThreshold | None, list[str]]:
        """The canary switches' PFC threshold that pauses first (switch buffer configuration,
        else inventory; ``tuner.pfc_threshold``) and the switches where neither gives one."""
        values: list[PfcThreshold] = []
        missing: list[str] = []
        for sw in self.inventory.switches:
            o = self.switch_facts()[sw.name]
            t = switch_threshold(sw, o.value if o.error is None else None)
            if t is None:
                missing.append(sw.name)
            else:
                values.append(t)
        return lowest(values), missing

    def nic_speeds(self) -> dict[str, int | None]:
        """Every canary NIC port's link speed as ``ethtool DEV`` reports it, in Mb/s (None where
        it reports none, or the host cannot be reached)."""
        from tuner.preflight_facts import link_speed_mbps
        from tuner.ssh.shell import q

        hosts = {h.name: h for h in self.inventory.hosts}

        def read(c: Any) -> dict[str, int | None]:
            return {r.nic: link_speed_mbps(c.run(f"ethtool {q('netdev', r.netdev)}",
                                                 check=False).stdout)
                    for r in hosts[c.name].rail_entries()}

        out: dict[str, int | None] = {}
        for name, o in self.pool.fan_out(read, list(hosts)).items():
            out.update(o.value if o.error is None and o.value is not None
                       else {r.nic: None for r in hosts[name].rail_entries()})
        return out

    def uplink_speeds(self) -> dict[str, int | None]:
        """The speed of every canary leaf's ``uplink_ports`` as CONFIG_DB ``PORT`` gives it, in
        Mb/s (None where it gives none). SONiC only: NVUE switches are not read."""
        out: dict[str, int | None] = {}
        for sw in (s for s in self.inventory.switches if s.platform == "sonic"):
            o = self.switch_facts()[sw.name]
            db = (o.value or {}).get("config_db") or {} if o.error is None else {}
            for p in sw.uplink_ports:
                speed = str(((db.get("PORT") or {}).get(p) or {}).get("speed", ""))
                out[f"{sw.name}/{p}"] = int(speed) if speed.isdigit() else None
        return out

    def counter_poll_s(self) -> dict[str, float]:
        """Seconds between two updates of each switch counter group (SONiC ``counterpoll``;
        the slowest switch counts): ``{"pfc": 1.0, "queue": 10.0, "wred": 10.0}``."""
        from tuner.drivers.sonic import POLL_GROUPS

        out: dict[str, float] = {}
        for sw in self.inventory.switches:
            o = self.switch_facts()[sw.name]
            poll = (o.value or {}).get("counterpoll") or {} if o.error is None else {}
            for section, group in POLL_GROUPS.items():
                if group in poll and poll[group][1]:  # a group that is off never moves
                    out[section] = max(out.get(section, 0.0), poll[group][0])
        return out

    def describe(self) -> ClusterDescription:
        inv = self.inventory
        facts = {
            "hosts": ",".join(f"{h.name}={h.address}" for h in inv.hosts),
            "switches": ",".join(f"{s.name}={s.platform}" for s in inv.switches),
            "lossless_queue": ",".join(sorted({str(s.lossless_queue) for s in inv.switches})),
            "roce_priority": ",".join(sorted({str(h.roce_priority) for h in inv.hosts})),
            "launcher": inv.launcher.host,
            # replicates as fresh placements (rank order, probe pairs), or repeats of one
            "placements": "vary" if placement.varies(inv) else "fixed",
        }
        if inv.switches:
            pfc, missing = self.pfc_threshold()
            if pfc is not None:
                facts["pfc_threshold"] = pfc.to_fact()  # the loop's Kmax ceiling reads this
            if missing:
                facts["pfc_threshold_unknown"] = ",".join(missing)
            poll = self.counter_poll_s()
            if poll:
                facts["counter_poll_s"] = ",".join(f"{k}={v:g}" for k, v in sorted(poll.items()))
        return ClusterDescription(
            name=self.name, backend="ssh",
            canary_switches=[s.name for s in inv.switches],
            canary_nics=[r.nic for h in inv.hosts for r in h.rail_entries()],
            nic_gbps=max((h.nic_gbps for h in inv.hosts), default=0.0),
            facts=facts)

    def snapshot(self) -> Settings:
        return self._read_all("snapshot")

    def read_back(self) -> Settings:
        return self._read_all("read back")

    def _read_all(self, what: str) -> Settings:
        keys = list(self.drivers())
        res = self._fan(lambda d: d.read(), keys)
        failed = _failures(res)
        if failed:
            raise ApplyError(f"{what} failed on {sorted(failed)}: {_describe_failures(failed)}")
        switches = {k: o.value for k, o in res.items() if isinstance(o.value, EcnSettings)}
        nics = {k: o.value for k, o in res.items() if isinstance(o.value, DcqcnSettings)}
        return Settings(switches=switches, nics=nics)

    def apply(self, settings: Settings) -> None:
        drivers = self.drivers()
        wanted: dict[str, EcnSettings | DcqcnSettings] = {**settings.switches, **settings.nics}
        unknown = sorted(set(wanted) - set(drivers))
        if unknown:
            raise ApplyError(f"not in the inventory: {unknown}; refusing to apply anything")
        nic_keys = {r.nic for r in self.nic_entries()}
        misplaced = sorted(set(settings.switches) & nic_keys) + sorted(
            set(settings.nics) - nic_keys)
        if misplaced:
            raise ApplyError(f"switch/NIC kind does not match the inventory for {misplaced}")
        before: dict[str, EcnSettings | DcqcnSettings] = {}
        touched: set[str] = set()

        def one(drv: Driver[Any]) -> None:
            try:
                before[drv.target] = drv.write(wanted[drv.target])
            except WriteError as exc:
                if exc.before is not None:  # the command ran: the device may be half-changed
                    before[drv.target] = exc.before  # type: ignore[assignment]
                    touched.add(drv.target)
                raise
            if before[drv.target] != wanted[drv.target]:
                touched.add(drv.target)

        res = self._fan(one, list(wanted))
        failed = _failures(res)
        if not failed:
            return
        self._restore(before, touched, failed)

    def _restore(self, before: dict[str, Any], touched: set[str],
                 failed: dict[str, Exception]) -> None:
        """Put every touched target back, then raise ApplyError (or RollbackError)."""
        back = sorted(touched)
        res = self._fan(lambda d: d.write(before[d.target]), back)
        not_back = _failures(res)
        cause = _describe_failures(failed)
        if not_back:
            raise RollbackError(
                f"apply failed on {sorted(failed)} ({cause}); restoring {back} FAILED on "
                f"{sorted(not_back)}: {_describe_failures(not_back)}")
        raise ApplyError(f"apply failed on {sorted(failed)} ({cause}); restored {back} to "
                         "their previous settings")

    def counters(self) -> Counters:
        res = self._fan(lambda d: timed(d.counters), list(self.drivers()))
        failed = _failures(res)
        if failed:
            raise MeasurementError(f"counters unreadable on {sorted(failed)}: "
                                   f"{_describe_failures(failed)}")
        return Counters.gather(o.value for o in res.values() if o.value is not None)

    def measure(self, workload: Workload, monitor: Monitor | None = None, *,
                replicate: int = 0) -> Measurement:
        # Replicate r runs on placement r (rank order, probe pairs) for the baseline and every
        # trial alike, so repeats pair up; the measurement's notes name it.
        try:
            place = placement.for_replicate(self.inventory, replicate)
            m = self.settled(run_measurement(self, workload, monitor, place))
            return m.model_copy(update={"replicate": replicate})
        except TunerError:
            raise
        except Exception as exc:  # a bug or an unexpected remote answer: keep the reason
            raise MeasurementError(f"measurement failed: {type(exc).__name__}: {exc}") from exc

    def settled(self, m: Measurement) -> Measurement:
        """Take the final counters one switch poll interval after the traffic ended.

        A switch publishes its counters every poll interval (SONiC ``counterpoll``: port stats
        1 s, queue and WRED/ECN stats 10 s by default), so a read right after the traffic can
        miss up to one interval of drops or marks: never judge such a value as "no change".
        """
        wait = max(self.counter_poll_s().values(), default=0.0) if self.inventory.switches \
            else 0.0
        if wait <= 0 or not m.counters_after.ports:
            return m
        left = wait - (time.monotonic() - m.counters_after.taken_at_s)
        if left > 0:
            time.sleep(left)
        return m.model_copy(update={
            "counters_after": self.counters(),
            "notes": [*m.notes, f"final counters read {wait:g} s after the traffic (switch "
                                "counter poll interval)"]})

    def __enter__(self) -> SshCluster:
        return self

    def close(self) -> None:
        self.pool.close()
