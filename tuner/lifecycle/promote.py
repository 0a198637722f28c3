"""Promotion of a confirmed winner to an inventory group, wave by wave.

Per target the wanted settings are what it holds now with the winner's knob values put in
(``wanted``): a switch keeps its ECN on/off state, a NIC keeps any knob the study did not
search. ``Fleet.cluster`` is the SSH backend restricted to one wave's targets, so every change
goes through the same all-or-nothing apply, read-back, journal, dead-man timers and verified
restore as a trial. After a wave is applied, ``gate`` watches the wave's counters for
``gate_s`` seconds against the experiment's safety limits (PFC storm, lossless drops, CRC,
watchdog, link); a violation rolls the wave back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tuner.settings import DcqcnSettings, EcnSettings, Settings

S = TypeVar("S", EcnSettings, DcqcnSettings)

if TYPE_CHECKING:
    from safety.journal import Journal
    from safety.limits import SafetyLimits, Violation
    from tuner.cluster.base import Cluster
    from tuner.drivers.base import Driver
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.persist import HostMethod
    from tuner.lifecycle.promoted import PromotedRecord
    from tuner.lifecycle.waves import Wave


def wanted(live: S, values: dict[str, int]) -> S:
    """``live`` with the winner's knob values of its kind put in (others kept)."""
    mine = {k: v for k, v in values.items() if k in type(live).model_fields and k != "enabled"}
    return type(live).model_validate({**live.model_dump(), **mine})


def wanted_settings(live: Settings, values: dict[str, int]) -> Settings:
    return Settings(switches={k: wanted(v, values) for k, v in live.switches.items()},
                    nics={k: wanted(v, values) for k, v in live.nics.items()})


@dataclass
class TargetPlan:
    """One target of one wave: what it holds, what it will hold, the exact commands."""

    target: str
    live: EcnSettings | DcqcnSettings
    new: EcnSettings | DcqcnSettings
    apply: str  # the driver's single write command (read, write what differs, read back)
    rollback: str
    persist: list[str] = field(default_factory=list)
    persist_read: str = ""

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        a, b = self.live.model_dump(), self.new.model_dump()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def plan_target(driver: Driver[Any], live: Any, values: dict[str, int],
                persist: HostMethod | None) -> TargetPlan:
    """Commands for one target (pure given what it holds)."""
    from tuner.lifecycle.persist import persistence_for

    new = wanted(live, values)
    p = persistence_for(driver, persist) if persist else None
    return TargetPlan(
        target=driver.target, live=live, new=new,
        apply=driver.write_command(live, new) if new != live else "",
        rollback=driver.write_command(new, live) if new != live else "",
        persist=p.save_commands(new) if p else [], persist_read=p.read_command() if p else "")


def render_plan(waves: list[Wave], plans: dict[str, TargetPlan],
                maintenance: dict[str, str] | None = None) -> list[str]:
    """The dry run: every command per target, wave by wave. ``maintenance``: switch -> the
    command whose output must say it is in maintenance before its wave goes."""
    lines: list[str] = []
    for w in waves:
        lines.append(f"wave {w.index} ({w.name}): {len(w.targets)} target(s)")
        for k in w.targets:
            tp = plans[k]
            ch = ", ".join(f"{n} {a}->{b}" for n, (a, b) in tp.changes.items())
            lines.append(f"  {k}: {ch or 'already holds the winner'}")
            if k in (maintenance or {}):
                lines.append(f"    only in maintenance: {(maintenance or {})[k]}")
            if tp.apply:
                lines.append(f"    apply:    {tp.apply}")
                lines.append(f"    rollback: {tp.rollback}")
            for cmd in tp.persist:
                lines.append(f"    persist:  {cmd}")
            if tp.persist_read:
                lines.append(f"    verify:   {tp.persist_read}")
    return lines


def gate(cluster: Cluster, limits: SafetyLimits, gate_s: float,
         sleep: Callable[[float], None] = time.sleep, polls: int = 4) -> list[Violation]:
    """Watch the wave's counters for ``gate_s`` seconds with a trial's live monitor (sustained
    PFC pausing over the storm window, pause-frame rates, lossless drops, CRC errors, PFC
    watchdog, links); the violations found, empty when the wave is healthy."""
    from safety.limits import Violation
    from safety.monitor import LiveMonitor
    from tuner.errors import SafetyAbort

    monitor = LiveMonitor(limits)
    first = cluster.counters()
    monitor.start(first)
    for _ in range(max(1, polls)):
        sleep(gate_s / max(1, polls))
        now = cluster.counters()
        try:
            monitor.poll(now, now.taken_at_s - first.taken_at_s)
        except SafetyAbort as exc:
            return [Violation(code=exc.reason, detail=exc.detail)]
    return []


@dataclass
class WaveResult:
    wave: Wave
    outcome: str  # "promoted", "unchanged", "rolled_back:<code>", "failed:apply"
    detail: str = ""
    seconds: float = 0.0
    persisted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome in ("promoted", "unchanged")


def _parts(s: Settings) -> dict[str, EcnSettings | DcqcnSettings]:
    return {**s.switches, **s.nics}


class _GateFailed(Exception):
    def __init__(self, found: list[Violation]) -> None:
        super().__init__("; ".join(map(str, found)))
        self.found = found


def apply_wave(fleet: Fleet, w: Wave, values: dict[str, int], *, study: str,
               limits: SafetyLimits, gate_s: float, journal: Journal,
               shield: Callable[[], AbstractContextManager[None]] = nullcontext,
               ) -> tuple[WaveResult, Settings, Settings]:
    """One wave as a guarded change (``tuner.transaction``, the trials' journal/read-back/
    verified-restore sequence) behind dead-man timers: apply all-or-nothing, read back, run
    the counter gate; kept (journal ``kept``, timers disarmed: the confirm) or restored with
    verification (journal ``restored``). Returns the result, the settings before and wanted."""
    from tuner.cluster.deadman import DeadmanCluster
    from tuner.errors import ApplyError
    from tuner.transaction import Transactions

    t0 = time.monotonic()
    inner = fleet.cluster(list(w.targets))
    cluster: Any = DeadmanCluster(inner, limits.deadman_timeout_s) \
        if limits.deadman_timeout_s > 0 else inner
    before = cluster.snapshot()
    target = wanted_settings(before, values)
    if target == before:
        return WaveResult(w, "unchanged", "every target already holds the winner"), \
            before, target
    tx = Transactions(cluster, journal, f"promote:{study}", before, shield)
    try:
        with tx.tentative(target, w.index):
            found = gate(inner, limits, gate_s)
            if found:
                raise _GateFailed(found)
    except _GateFailed as exc:
        res = WaveResult(w, f"rolled_back:{exc.found[0].code}", str(exc))
    except ApplyError as exc:
        res = WaveResult(w, "failed:apply", str(exc))
    else:
        res = WaveResult(w, "promoted")
    finally:
        cluster.close()  # verified state: the dead-man timers are disarmed
    res.seconds = time.monotonic() - t0
    return res, before, target


def persist_targets(fleet: Fleet, parts: dict[str, EcnSettings | DcqcnSettings],
                    method: HostMethod, what: str) -> list[str]:
    """Save each target's settings to its boot-time source, verified by reading it back."""
    from tuner.errors import ApplyError
    from tuner.lifecycle.persist import persist, persistence_for

    out = fleet.fan(lambda d: persist(persistence_for(d, method), parts[d.target]),
                    list(parts))
    bad = {k: o.error for k, o in out.items() if o.error is not None}
    if bad:
        raise ApplyError(f"{what} applied but persisting failed on "
                         + "; ".join(f"{k}: {e}" for k, e in sorted(bad.items())))
    return sorted(out)


def recover_open(fleet: Fleet, journal: Journal) -> list[str]:
    """Close every promotion change a killed ``promote`` left open: put its targets back on
    the journalled previous settings (verified; the dead-man timers may already have done it)
    and journal ``restored:recover``. Returns the ids closed; raises ``RollbackError``."""
    from safety.rollback import restore

    closed = []
    for entry in journal.entries():
        if entry.closed:
            continue
        outside = sorted(set(entry.targets) - set(fleet.keys))
        if outside:
            from tuner.errors import RollbackError

            raise RollbackError(f"{journal.path}: open promotion change {entry.id} "
                                f"({entry.study}) touched {outside}, outside group "
                                f"{fleet.group!r}; re-run promote with that group")
        restore(fleet.cluster(list(entry.targets)), entry.baseline)
        journal.end(entry.id, "restored:recover")
        closed.append(entry.id)
    return closed


def promote_waves(fleet: Fleet, waves: list[Wave], values: dict[str, int], *, study: str,
                  limits: SafetyLimits, gate_s: float, journal: Journal,
                  record: PromotedRecord, persist: HostMethod | None = None,
                  on_wave: Callable[[WaveResult], None] | None = None,
                  shield: Callable[[], AbstractContextManager[None]] = nullcontext,
                  check: Callable[[], None] = lambda: None) -> list[WaveResult]:
    """Apply ``values`` wave by wave (``apply_wave``); stop at the first wave that is rolled
    back or fails. Record lines say what each target holds afterwards; with ``persist`` a
    kept wave is also saved to each platform's boot-time source and verified from it.
    ``check`` runs before each wave (raise there to stop between waves)."""
    from tuner.lifecycle.maintenance import refusals
    from tuner.lifecycle.promoted import entry_for

    results: list[WaveResult] = []
    for w in waves:
        check()  # a pending signal stops before the next wave, never inside one
        held = refusals(fleet, list(w.targets))
        if held:  # nothing of this wave is touched
            results.append(WaveResult(w, "refused:not_in_maintenance", "; ".join(held)))
            if on_wave:
                on_wave(results[-1])
            break
        res, before, target = apply_wave(fleet, w, values, study=study, limits=limits,
                                         gate_s=gate_s, journal=journal, shield=shield)
        common = {"study": study, "group": fleet.group, "wave": w.index}
        if not res.ok:
            if res.outcome.startswith("rolled_back"):
                record.append([entry_for(k, v, event="rolled_back", **common)
                               for k, v in _parts(before).items()])
            results.append(res)
            if on_wave:
                on_wave(res)
            break
        parts = _parts(target)
        if persist is not None:
            res.persisted = persist_targets(fleet, parts, persist, f"wave {w.index}")
        record.append([entry_for(k, v, event="promoted", persisted=k in res.persisted,
                                 **common) for k, v in parts.items()])
        results.append(res)
        if on_wave:
            on_wave(res)
    return results
