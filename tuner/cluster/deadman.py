"""Commit-confirm for the SSH backend: a dead-man timer on every target a change touches.

``DeadmanCluster`` wraps an ``SshCluster``. Before a change it arms, on each target that will
differ, a timer (``safety.deadman``) whose restore command is the driver's own write command
from the trial settings back to what the target holds now; a background thread renews every
timer every ``timeout_s / 3``; putting the canary back (``apply`` of the pre-change state)
disarms them. If the tuner is killed or loses its network, renewals stop and every target heals
itself within ``timeout_s`` -- no ``ecntune recover`` needed, nothing installed on the target.

If arming fails anywhere, nothing is applied. A target that is locked by another tuner's change,
or whose runtime directory is not a private 0700 directory, refuses the arm: the study stops
(``DeadmanRefused``, exit 3) with nothing applied. A lock held by an armed change refuses the
study already at its snapshot, and a trial never lands on a canary that moved since then. A
renewal that finds the timer gone (the target rebooted, or its files were removed) means the
change is unprotected: the measurement is stopped at its next monitor poll and the trial fails,
so the loop restores at once.
``close`` after a verified state (a completed restore, or a kept winner) disarms the timers --
the "confirm"; after a failed restore it leaves them armed, so the targets still heal.

Cumulus NVUE has a dead-man of its own, and it is used as a second layer (``nvue_confirm_s``):
a trial's apply is ``nv config apply --confirm <n>s``, which NVUE rolls back by itself unless
confirmed -- a platform feature that needs neither the tuner nor the runtime directory and,
unconfirmed, is not saved as the startup configuration even with auto-save on (a plain apply
is: the reboot hazard). The NVUE timer cannot be renewed, so it must outlast a trial; the
shell timer keeps the fast, renewed heal, and its restore on NVUE is ``--confirm-no``. The
restore of a trial rolls the confirm back (``--confirm-no``), a kept winner confirms it
(``--confirm-yes``, in ``close``); a measurement after which NVUE no longer holds the apply
(its window ran out) fails like one during which a shell timer fired.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from typing import TYPE_CHECKING, Any

from safety.deadman import DeadmanTimer, parse_reply
from tuner.cluster.base import Cluster
from tuner.drivers.nvue import CONFIRM_NO, NvueDriver
from tuner.errors import ApplyError, MeasurementError, ProtectionLost, RollbackError, TunerError

if TYPE_CHECKING:
    from objectives.measurement import Counters, Measurement
    from tuner.cluster.base import ClusterDescription, Monitor
    from tuner.settings import Settings
    from tuner.workload import Workload

log = logging.getLogger(__name__)
_SAFE_HOST = re.compile(r"[^A-Za-z0-9_.-]+")
# The shell timer's restore on NVUE: roll the unconfirmed apply back (status 1, logged in the
# timer's .log, when NVUE's own timer already did).
NVUE_ROLLBACK = "nv config apply --confirm-no"
NVUE_ROLLBACK_QUIET = CONFIRM_NO


class DeadmanRefused(TunerError):
    """A target refused the dead-man arm (locked by another tuner, unsafe runtime directory);
    nothing was applied and the study stops (exit 3)."""


def _parts(s: Settings) -> dict[str, Any]:
    return {**s.switches, **s.nics}


class DeadmanCluster(Cluster):
    """``inner`` (an SSH cluster) with dead-man timers around every change."""

    def __init__(self, inner: Any, timeout_s: float, *, directory: str | None = None,
                 renew_every_s: float | None = None, nvue_confirm_s: float = 0) -> None:
        self.inner = inner
        self.timeout_s = float(timeout_s)
        self.nvue_confirm_s = int(round(nvue_confirm_s))
        self.directory = directory
        self.renew_every_s = renew_every_s or max(0.5, self.timeout_s / 3)
        self.armed: dict[str, DeadmanTimer] = {}
        self.restore_to: Settings | None = None
        self.baseline: Settings | None = None  # set by snapshot()
        self.fired: list[str] = []  # targets whose timer fired while we were alive
        self.lost: list[str] = []  # targets whose timer vanished (reboot, files removed)
        self.revoked: list[str] = []  # timer claimed or lock taken by someone else: not ours
        self.verified = True  # the canary is on a state the tuner verified
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.who = _who()

    # -- timers ---------------------------------------------------------------------------
    def _run(self, key: str, command: str) -> str:
        drv = self.inner.drivers()[key]
        return str(drv.runner.run(command, timeout_s=30).stdout)

    def _fan(self, fn: Any, keys: list[str]) -> dict[str, Any]:
        """``fn(key)`` per key through the pool (targets in parallel, a host's rails one
        after the other); ``{key: Outcome}``."""
        from tuner.cluster.ssh import fan_keys

        drivers = self.inner.drivers()
        return fan_keys(self.inner.pool, lambda k: drivers[k].runner.name, fn, keys)

    def _nvue(self) -> dict[str, NvueDriver]:
        """NVUE drivers whose trial applies use NVUE's commit-confirm."""
        if self.nvue_confirm_s <= 0:
            return {}
        return {k: d for k, d in self.inner.drivers().items() if isinstance(d, NvueDriver)}

    def _confirm_nvue(self) -> None:
        """Keep what the canary holds on NVUE (``--confirm-yes``); on a failure NVUE rolls it
        back by itself at the end of its window."""
        for k, drv in self._nvue().items():
            try:
                drv.confirm()
            except TunerError as exc:
                log.warning("%s: NVUE confirm failed (%s): NVUE rolls the change back within "
                            "%d s", k, exc, self.nvue_confirm_s)

    def arm(self, before: Settings, settings: Settings) -> list[str]:
        """Arm a timer on every target ``settings`` changes; returns their keys."""
        drivers = self.inner.drivers()
        old, new = _parts(before), _parts(settings)
        keys = [k for k in new if k in old and old[k] != new[k]]
        timers = {k: DeadmanTimer.new(k, self.directory, self.who) for k in keys}
        restore = {k: (NVUE_ROLLBACK if k in self._nvue() else
                       drivers[k].write_command(new[k], old[k])) for k in keys}
        res = self._fan(lambda k: parse_reply(
            self._run(k, timers[k].arm_command([restore[k]], self.timeout_s))), keys)
        ok = {k: timers[k] for k, o in res.items() if o.error is None and o.value[0] == "armed"}
        bad = {k: o.error or " ".join(o.value) for k, o in res.items() if k not in ok}
        with self._lock:
            self.armed.update(ok)
        if bad:
            self.disarm()
            refused = any(o.error is None and o.value[0] in ("locked", "unsafe")
                          for k, o in res.items() if k in bad)
            text = ("cannot arm the dead-man timer on "
                    + "; ".join(f"{k}: {v}" for k, v in sorted(bad.items()))
                    + "; nothing was applied")
            if refused:
                raise DeadmanRefused(text + " (a `locked` target is held by another tuner's "
                                     "change; `ecntune recover` takes over the lock of one "
                                     "that is gone)")
            raise ApplyError(text)
        self.restore_to = before
        self._start_renewing()
        return keys

    def _start_renewing(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="ecntune-deadman",
                                        daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every_s):
            self.renew()

    def renew(self) -> None:
        with self._lock:
            timers = dict(self.armed)
        if not timers:
            return
        res = self._fan(lambda k: parse_reply(
            self._run(k, timers[k].renew_command(self.timeout_s))), list(timers))
        for k, o in res.items():
            if o.error is not None:
                log.warning("%s: dead-man renew failed: %s", k, o.error)
            elif o.value[0] != "renewed":
                log.warning("%s: dead-man timer %s: %s", k, timers[k].token, " ".join(o.value))
                with self._lock:  # not our own disarm racing this renewal
                    ours = self.armed.get(k) is timers[k]
                if o.value[0] in ("fired", "firing"):
                    self.fired.append(k)
                elif o.value[0] in ("missing", "unsafe"):
                    self.lost.append(k)  # protection is gone: the trial must stop now
                elif o.value[0] in ("disarmed", "stolen") and ours:
                    self.revoked.append(k)  # someone else claimed the change: stop now

    def disarm(self) -> None:
        """Disarm every timer (those that already fired are noted in ``fired``)."""
        self._stop.set()
        with self._lock:
            timers = dict(self.armed)
            self.armed.clear()
        if not timers:
            return
        res = self._fan(lambda k: parse_reply(self._run(
            k, f"{timers[k].disarm_command()}; {timers[k].cleanup_command()}")), list(timers))
        for k, o in res.items():
            if o.error is not None:
                log.warning("%s: dead-man disarm failed (%s); it will restore the baseline "
                            "at its deadline", k, o.error)
            elif o.value[0] in ("fired", "firing"):
                self.fired.append(k)

    # -- Cluster --------------------------------------------------------------------------
    def apply(self, settings: Settings) -> None:
        if self.timeout_s <= 0:  # no timers, but never on top of someone else's change
            self._refuse_if_moved(settings, self.inner.read_back())
            self.inner.apply(settings)
            return
        if self.armed:
            try:
                self.inner.apply(settings)
            except (ApplyError, RollbackError):
                self.verified = False
                raise
            if settings == self.restore_to:  # back on the pre-change state: confirmed
                self.disarm()
                self.verified = True
            return
        before = self.inner.read_back()
        self._refuse_if_moved(settings, before)
        if before == settings or before != self.baseline:
            # Only a move away from the study's baseline snapshot is armed: a timer restores
            # "what the target holds now", which must be the known-good state -- never the
            # dirty state ``recover`` (or a restarted run) is moving away from.
            self.inner.apply(settings)
            self.verified = True
            return
        self.arm(before, settings)
        nvue = self._nvue()
        for drv in nvue.values():  # this change only: NVUE rolls it back unless confirmed
            drv.confirm_s = self.nvue_confirm_s
        try:
            self.inner.apply(settings)
        except RollbackError:  # targets may be dirty: the timers stay armed and heal them
            self.verified = False
            raise
        except ApplyError:  # all-or-nothing: the inner backend put everything back
            self.disarm()
            raise
        finally:
            for drv in nvue.values():
                drv.confirm_s = None
        self.verified = True

    def close(self) -> None:
        try:
            if self.armed and self.verified:
                self._confirm_nvue()  # the tuner ends on a state it verified: confirm
                self.disarm()
            elif self.armed:
                log.warning("leaving dead-man timers armed on %s: they restore the baseline "
                            "within %g s", sorted(self.armed), self.timeout_s)
                self._stop.set()
        finally:
            self.inner.close()

    def _refuse_if_moved(self, settings: Settings, before: Settings) -> None:
        """Someone else moved the canary since the study's snapshot (another tuner, a hand
        change): a trial on top of it would be measured against the wrong baseline and its
        restore would overwrite their change. Stop before touching anything."""
        if (self.baseline is not None and settings != self.baseline
                and before not in (settings, self.baseline)):
            raise DeadmanRefused(
                "the canary changed since this study read its baseline ("
                + ", ".join(sorted(before.diff(self.baseline))[:5])
                + "): another tuner or a hand change? nothing was applied; find who, then "
                "`ecntune recover` or start a new study")

    def describe(self) -> ClusterDescription:
        return self.inner.describe()

    def snapshot(self) -> Settings:
        """The baseline; changes away from it are the ones armed with timers.

        A target whose lock is held by another tuner's armed change refuses the study here,
        before its baseline is read: that "baseline" would be the other tuner's trial."""
        self.refuse_if_held()  # with deadman_timeout_s: 0 too: the locks of other tuners hold
        self.baseline = self.inner.snapshot()
        return self.baseline

    def refuse_if_held(self) -> None:
        """``DeadmanRefused`` when any canary target is locked by a change that may still be
        restored (its timer armed or firing); stale locks are left to ``recover``."""
        keys = list(self.inner.drivers())
        probe = {k: DeadmanTimer.new(k, self.directory) for k in keys}
        res = self._fan(lambda k: self._run(k, probe[k].holder_command()).split(), keys)
        with self._lock:
            mine = {t.token for t in self.armed.values()}
        held = {k: o.value for k, o in res.items()
                if o.error is None and o.value[:1] == ["held"] and o.value[1:2] != []
                and o.value[1] not in mine and o.value[2:3] in (["armed"], ["firing"])}
        if held:
            raise DeadmanRefused(
                "; ".join(f"{k}: locked {' '.join(v[1:])}" for k, v in sorted(held.items()))
                + ": another tuner has a change armed on this canary; nothing was applied "
                "(`ecntune recover` takes over the lock of a tuner that is gone)")

    def read_back(self) -> Settings:
        return self.inner.read_back()

    def counters(self) -> Counters:
        return self.inner.counters()

    def measure(self, workload: Workload, monitor: Monitor | None = None, *,
                replicate: int = 0) -> Measurement:
        """Measure; if a timer fired meanwhile (the tuner was cut off for longer than the
        timeout), the targets went back to the baseline mid-trial and the numbers do not
        belong to the trial's settings: fail the measurement instead of scoring it. If a timer
        vanished (``lost``), the change is unprotected: stop at the next monitor poll."""
        seen, gone = len(self.fired), len(self.lost)
        guard = _LossGuard(self, monitor, gone, len(self.revoked))
        result = self.inner.measure(workload, guard, replicate=replicate)
        if self.armed:
            self.renew()
            self._check_nvue()
        guard.check()
        if len(self.fired) > seen:
            raise MeasurementError(
                f"dead-man timer fired on {sorted(set(self.fired[seen:]))} during the trial "
                f"(renewals missed for {self.timeout_s:g} s, or NVUE's {self.nvue_confirm_s} s "
                "confirm window ran out): the measurement is not of the trial's settings")
        return result

    def _check_nvue(self) -> None:
        """An NVUE apply no longer waiting for confirmation was rolled back by NVUE (its
        window ran out mid-trial): the targets went back to the baseline, as when a shell
        timer fires."""
        pending = {k: d for k, d in self._nvue().items() if d.confirm_base is not None}
        res = self._fan(lambda k: pending[k].confirm_pending(), list(pending))
        for k, o in res.items():
            if o.error is None and not o.value:
                log.warning("%s: NVUE rolled the trial back by itself (--confirm %d s ran "
                            "out)", k, self.nvue_confirm_s)
                self.fired.append(k)
            elif o.error is not None:
                log.warning("%s: cannot read NVUE's revisions: %s", k, o.error)

    def take_over_locks(self, wait_s: float | None = None) -> list[str]:
        """``recover``: release target locks left by a tuner that is gone. A lock whose timer
        is still armed (a live tuner elsewhere, or a dead one's timer about to fire) is waited
        for up to ``wait_s`` (default: the timeout plus 5 s), then refused."""
        import time

        keys = sorted(self.inner.drivers())
        deadline = time.monotonic() + (self.timeout_s + 5 if wait_s is None else wait_s)
        lines: list[str] = []
        claim: set[str] = set()  # locks of a tuner known dead: its armed timer is claimed
        while True:
            res = self._fan(lambda k, c=frozenset(claim): parse_reply(self._run(
                k, DeadmanTimer.new(k, self.directory).takeover_command(k in c))), keys)
            busy: dict[str, str] = {}
            for k in keys:
                o = res[k]
                if o.error is not None:
                    raise RollbackError(f"{k}: cannot check its lock: {o.error}")
                word, rest = o.value
                if word == "busy":
                    busy[k] = rest
                elif word == "taken":
                    lines.append(f"{k}: took over the lock of a tuner that is gone ({rest})")
                    if k in self._nvue():  # its unconfirmed NVUE apply, as its timer would
                        self._run(k, NVUE_ROLLBACK_QUIET)
                elif word == "unsafe":
                    raise RollbackError(f"{k}: dead-man runtime directory refused: {rest}")
            dead = {k for k, rest in busy.items() if k not in claim and _dead_here(rest)}
            if dead:
                claim |= dead
                keys = sorted(dead | set(busy))
                continue
            if not busy:
                return lines
            if time.monotonic() > deadline:
                raise RollbackError(
                    "target(s) locked by a change whose dead-man timer is still armed: "
                    + ", ".join(f"{k} (change {v})" for k, v in sorted(busy.items()))
                    + ". Another tuner is running on them; stop it first")
            keys = sorted(busy)
            time.sleep(1.0)

    def __getattr__(self, name: str) -> Any:  # inventory, pool, drivers of the SSH backend
        return getattr(self.inner, name)



class _LossGuard:
    """The live monitor, plus: a vanished dead-man timer stops the measurement at its poll."""

    def __init__(self, owner: DeadmanCluster, inner: Monitor | None, gone: int,
                 revoked: int) -> None:
        self.owner, self.inner, self.gone, self.revoked = owner, inner, gone, revoked
        self.interval_s = inner.interval_s if inner is not None else 0.5

    def check(self) -> None:
        taken = self.owner.revoked[self.revoked:]
        if taken:
            raise ProtectionLost(
                f"dead-man timer claimed or target lock taken by another process on "
                f"{sorted(set(taken))} during the trial (a `recover` judged this tuner dead?): "
                "the canary is not this trial's; failing it, restoring now")
        lost = self.owner.lost[self.gone:]
        if lost:
            raise MeasurementError(
                f"dead-man timer gone on {sorted(set(lost))} during the trial (target rebooted "
                "or its timer files were removed): the change is unprotected; restoring now")

    def poll(self, counters: Counters, elapsed_s: float) -> None:
        self.check()
        if self.inner is not None:
            self.inner.poll(counters, elapsed_s)


def _who() -> str:
    """This tuner as a lock holder (``safety.deadman._WHO``): host, pid, boot id, PID namespace
    and start time -- what ``_dead_here`` needs to prove it dead (``optuna_io.owner_gone``)."""
    from tuner.optuna_io import process_owner

    o = process_owner()
    ns = re.sub(r"\D", "", str(o["ns"])) or "0"
    return (f"{_SAFE_HOST.sub('_', str(o['host']))[:64] or 'host'} {o['pid']} "
            f"{o['boot'] or '-'} {ns} {o['start'] or 0}")


def _dead_here(busy_reply: str) -> bool:
    """``<token> armed <who>`` (``_who``) of a tuner provably gone: on this host, boot and PID
    namespace, its pid gone or now another, later process. Anything else -- another machine
    sharing the hostname, a container, an older lock without the proof -- may be alive."""
    from tuner.optuna_io import owner_gone, pid_namespace

    parts = busy_reply.split()
    if len(parts) != 7 or parts[1] != "armed":
        return False
    host, pid, boot, ns, start = parts[2:]
    if not (pid.isdigit() and ns.isdigit() and start.isdigit()):
        return False
    if host != _SAFE_HOST.sub("_", socket.gethostname())[:64] or \
            ns != (re.sub(r"\D", "", pid_namespace()) or "0"):
        return False  # another machine or PID namespace: only its timer can tell
    return owner_gone({"host": socket.gethostname(), "boot": boot, "ns": pid_namespace(),
                       "pid": int(pid), "start": int(start)})
