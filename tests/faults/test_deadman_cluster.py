"""``DeadmanCluster`` around a stand-in backend whose "devices" are local files and whose
"SSH" runs the real timer commands with the local ``sh`` -- the timer mechanics are real, only
the transport is local, so every rule of the wrapper is checked in a few seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import wait_until
from tuner.cluster.deadman import DeadmanCluster, DeadmanRefused
from tuner.errors import ApplyError, MeasurementError, RollbackError
from tuner.settings import DcqcnSettings, Settings
from tuner.ssh.transport import Outcome

NICS = ["h0/mlx5_0", "h1/mlx5_0"]


@dataclass
class Res:
    stdout: str


class LocalRunner:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.fail = fail

    def run(self, command: str, *, timeout_s: float | None = None, **_: Any) -> Res:
        if self.fail:
            raise ApplyError(f"{self.name}: connection refused")
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                             timeout=timeout_s or 10, check=True)
        return Res(out.stdout)


class FileDriver:
    """One NIC whose rpg_time_reset lives in a file."""

    def __init__(self, target: str, path: Path, runner: LocalRunner) -> None:
        self.target, self.path, self.runner = target, path, runner

    def write_command(self, current: DcqcnSettings, settings: DcqcnSettings) -> str:
        return f"printf '%s\\n' {settings.rpg_time_reset} > '{self.path}'"


class Pool:
    def fan_out(self, fn: Any, names: list[str]) -> dict[str, Outcome[Any]]:
        out: dict[str, Outcome[Any]] = {}
        for n in names:
            try:
                out[n] = Outcome(n, value=fn(type("C", (), {"name": n})()))
            except Exception as exc:  # noqa: BLE001 - one outcome per target, like the pool
                out[n] = Outcome(n, error=exc)
        return out


class FakeSsh:
    def __init__(self, root: Path, failing: str | None = None) -> None:
        self.files = {n: root / n.replace("/", "_") for n in NICS}
        for f in self.files.values():
            f.write_text("300\n")
        self._drivers = {n: FileDriver(n, self.files[n], LocalRunner(n.split("/")[0],
                                                                      n == failing))
                         for n in NICS}
        self.pool = Pool()
        self.apply_error: Exception | None = None
        self.applied = 0
        self.closed = False
        self.measure_s = 0.0

    def drivers(self) -> dict[str, FileDriver]:
        return self._drivers

    def snapshot(self) -> Settings:
        return self.read_back()

    def read_back(self) -> Settings:
        return Settings(nics={n: DcqcnSettings(rpg_time_reset=int(f.read_text()))
                              for n, f in self.files.items()})

    def apply(self, s: Settings) -> None:
        if self.apply_error is not None:
            raise self.apply_error
        self.applied += 1
        for n, d in s.nics.items():
            self.files[n].write_text(f"{d.rpg_time_reset}\n")

    def measure(self, workload: Any, monitor: Any = None, *, replicate: int = 0) -> str:
        """A measurement of ``measure_s`` seconds that feeds the monitor, like the real one."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.measure_s:
            time.sleep(0.05)
            if monitor is not None:
                monitor.poll(None, time.monotonic() - t0)
        return "measured"

    def close(self) -> None:
        self.closed = True


def trial(v: int = 17) -> Settings:
    return Settings.uniform([], NICS, {"rpg_time_reset": v})


def values(fake: FakeSsh) -> list[int | None]:
    """The knob files (``None`` for one caught in the middle of a write)."""
    return [int(t) if (t := f.read_text().strip()) else None for f in fake.files.values()]


@pytest.fixture
def setup(tmp_path: Path):
    made: list[DeadmanCluster] = []

    def make(timeout_s: float = 1.0, failing: str | None = None) -> tuple[DeadmanCluster,
                                                                          FakeSsh]:
        fake = FakeSsh(tmp_path, failing)
        dc = DeadmanCluster(fake, timeout_s, directory=str(tmp_path / "dm"),
                            renew_every_s=0.3)
        made.append(dc)
        dc.snapshot()  # the study's baseline, as the loop takes it
        return dc, fake

    yield make
    for dc in made:  # no timer outlives the test
        dc._stop.set()
        for t in list(dc.armed.values()):
            pid = Path(t.base + ".pid")
            if pid.exists():
                try:
                    os.kill(int(pid.read_text()), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass


def test_change_is_armed_renewed_and_disarmed_by_the_restore(setup) -> None:
    # 3 s: renewals keep it armed even when a loaded machine delays them (a clean-clone CI,
    # with both cores compiling kernels, once missed them for 2 s)
    dc, fake = setup(timeout_s=3.0)
    base = fake.read_back()
    dc.apply(trial())
    assert sorted(dc.armed) == NICS and values(fake) == [17, 17]
    time.sleep(6.2)  # twice the timeout: only the renewals keep it from firing
    assert values(fake) == [17, 17] and dc.fired == []
    assert dc.measure(None) == "measured"
    dc.apply(base)  # the loop's restore
    assert dc.armed == {} and values(fake) == [300, 300]
    time.sleep(3.5)  # past the timeout: a disarmed timer never writes again
    assert values(fake) == [300, 300]
    dc.close()
    assert fake.closed


def test_tuner_gone_timers_restore_by_themselves(setup) -> None:
    dc, fake = setup(timeout_s=1.0)
    dc.apply(trial())
    dc._stop.set()  # the process died: no more renewals, no close
    t0 = time.monotonic()
    assert wait_until(lambda: values(fake) == [300, 300], 5.0, 0.05)
    assert time.monotonic() - t0 < 1.0 + 2.0 + 0.5  # timeout + resolution + poll + slack


def test_arming_failure_applies_nothing(setup) -> None:
    dc, fake = setup(failing=NICS[1])
    with pytest.raises(ApplyError, match="cannot arm the dead-man timer on h1/mlx5_0"):
        dc.apply(trial())
    assert fake.applied == 0 and values(fake) == [300, 300]
    assert dc.armed == {}  # the one that armed was disarmed again


def test_failed_apply_disarms_but_failed_restore_keeps_timers(setup) -> None:
    dc, fake = setup(timeout_s=1.0)
    fake.apply_error = ApplyError("h1: write refused (inner backend put everything back)")
    with pytest.raises(ApplyError):
        dc.apply(trial())
    assert dc.armed == {}
    fake.apply_error = None
    dc.apply(trial())
    fake.apply_error = RollbackError("h1 unreachable")
    with pytest.raises(RollbackError):
        dc.apply(fake.read_back().model_copy(update={"nics": {
            n: DcqcnSettings() for n in NICS}}))
    dc.close()  # not verified: the timers stay armed and heal the canary
    assert wait_until(lambda: values(fake) == [300, 300], 5.0, 0.05)


def test_close_after_a_kept_winner_confirms(setup) -> None:
    dc, fake = setup(timeout_s=1.0)
    dc.apply(trial(42))  # e.g. --keep-best re-applies the winner and verifies it
    dc.close()
    time.sleep(2.2)
    assert values(fake) == [42, 42]


def test_timer_that_fired_mid_trial_fails_the_measurement(setup) -> None:
    dc, fake = setup(timeout_s=1.0)
    dc.apply(trial())
    dc._stop.set()  # renewals stall (network cut longer than the timeout) ...
    assert wait_until(lambda: values(fake) == [300, 300], 5.0, 0.05)
    with pytest.raises(MeasurementError, match="dead-man timer fired"):
        dc.measure(None)  # ... so these numbers are not the trial's


def test_moving_from_a_dirty_state_is_not_armed(setup) -> None:
    """``recover`` (no snapshot taken) and a restarted run's journal restore move the canary
    from trial settings to the baseline: a timer there would 'restore' the trial settings."""
    dc, fake = setup(timeout_s=1.0)
    dc.baseline = None  # recover builds the cluster and applies without a snapshot
    for f in fake.files.values():
        f.write_text("17\n")  # left dirty by a killed run
    dc.apply(Settings.uniform([], NICS, {}))
    assert dc.armed == {} and values(fake) == [300, 300]
    time.sleep(1.5)
    assert values(fake) == [300, 300]


def test_timer_gone_mid_trial_stops_the_trial_at_once(setup, tmp_path: Path) -> None:
    """The target rebooted (its runtime tmpfs and the timer process are gone): the renewal
    answers ``missing``, the measurement stops at its next poll and the trial fails."""
    dc, fake = setup(timeout_s=3.0)
    dc.apply(trial())
    for t in dc.armed.values():  # the reboot: the timer process and its files vanish
        os.kill(int(Path(t.base + ".pid").read_text()), signal.SIGKILL)
    for f in (tmp_path / "dm").iterdir():
        if f.is_file():
            f.unlink()
    fake.measure_s = 10.0
    t0 = time.monotonic()
    with pytest.raises(MeasurementError, match="dead-man timer gone on .*unprotected"):
        dc.measure(None)
    assert time.monotonic() - t0 < 0.3 + 0.5 + 1.0  # one renewal period, a poll, SSH slack
    assert sorted(set(dc.lost)) == NICS


def test_second_tuner_is_refused_by_the_target(setup) -> None:
    """A second tuner would snapshot the first one's trial as its 'baseline': the targets'
    locks refuse it before it reads one, and an arm would be refused too, so it changes
    nothing; once the first is gone and its timers fired, ``recover`` takes the locks over."""
    first, fake = setup(timeout_s=1.0)
    first.apply(trial(17))
    second = DeadmanCluster(fake, 1.0, directory=first.directory, renew_every_s=0.3)
    with pytest.raises(DeadmanRefused, match="locked .* armed .*nothing was applied"):
        second.snapshot()
    assert second.baseline is None
    first.refuse_if_held()  # its own armed change never refuses the tuner that holds it
    second.baseline = fake.read_back()  # had it read one anyway, the arm is refused
    with pytest.raises(DeadmanRefused, match="locked .* armed"):
        second.apply(trial(42))
    assert values(fake) == [17, 17] and fake.applied == 1
    first._stop.set()  # the first tuner dies; its timers restore the baseline
    assert wait_until(lambda: values(fake) == [300, 300], 5.0, 0.05)
    assert wait_until(lambda: all(Path(t.base + ".fired").exists()
                                  for t in first.armed.values()), 3.0, 0.05)
    second.snapshot()  # a new tuner starts on the healed canary ...
    with pytest.raises(DeadmanRefused, match="locked .* fired"):  # ... expired: only recover
        second.apply(trial(42))
    assert len(second.take_over_locks()) == 2
    second.snapshot()
    second.apply(trial(42))
    assert values(fake) == [42, 42]
    second.disarm()


def test_a_canary_moved_under_the_study_is_never_changed(setup) -> None:
    """Another tuner (or a hand change) moved the canary after the study read its baseline: a
    trial there would be scored against the wrong baseline and its restore would overwrite
    their change, so nothing is applied; moving back to the study's baseline still works."""
    dc, fake = setup(timeout_s=1.0)
    for f in fake.files.values():
        f.write_text("55\n")
    with pytest.raises(DeadmanRefused, match="changed since this study read its baseline "
                                             r"\(h0/mlx5_0.rpg_time_reset"):
        dc.apply(trial(17))
    assert values(fake) == [55, 55] and fake.applied == 0 and dc.armed == {}
    dc.apply(dc.baseline)
    assert values(fake) == [300, 300]


def test_nvue_trial_apply_waits_for_confirmation_and_rolls_back_with_confirm_no() -> None:
    """The NVUE driver's commit-confirm steps (pure): a trial applies with ``--confirm <min>``;
    going back is NVUE's own rollback, with the plain write only if nothing waits any more;
    another write while one waits rolls back first. Every command line parses in ``sh``."""
    import copy

    from tests.ssh.conftest import BASE_INVENTORY
    from tests.ssh.test_drivers_pure import _nv_read, _nv_tree
    from tuner.drivers import NvueDriver
    from tuner.drivers.nvue import CONFIRM_NO
    from tuner.inventory import parse_inventory
    from tuner.settings import EcnSettings

    inv = parse_inventory(copy.deepcopy(BASE_INVENTORY))
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    # default-global with the values the status sample displays (153.00 KB, 1.43 MB)
    row = {"min-threshold": 156672, "max-threshold": 1500000, "probability": 100}
    base = drv.parse(_nv_read(_nv_tree({}, {"default-global": row})))
    trial = EcnSettings(kmin_bytes=40000, kmax_bytes=200000, pmax_percent=100)
    assert drv.write_steps(base, trial)[-1] == "nv config apply -y >&2"
    drv.confirm_s = 600
    assert drv.write_steps(base, trial)[-1] == "nv config apply --confirm 10 -y >&2"  # minutes
    drv.confirm_s = 45  # not whole minutes: the undocumented <n>s form
    assert drv.write_steps(base, trial)[-1] == "nv config apply --confirm 45s -y >&2"
    drv.confirm_s, drv.confirm_base = None, base  # the trial waits for confirmation
    (back,) = drv.write_steps(trial, base)
    assert back.startswith("{ nv config apply --confirm-no >&2 || { nv unset interface swp1 ")
    assert back.endswith("nv config apply -y >&2; }; }")
    drv.confirm_s = 600
    other = EcnSettings(kmin_bytes=50000, kmax_bytes=300000, pmax_percent=50)
    steps = drv.write_steps(trial, other)
    assert steps[0] == CONFIRM_NO and steps[-1] == "nv config apply --confirm 10 -y >&2"
    for cmd in (drv.write_command(trial, base), drv.write_command(trial, other)):
        assert subprocess.run(["sh", "-n", "-c", cmd]).returncode == 0, cmd


def _forge_who(dm: Path, who: str) -> None:
    """Rewrite the holder recorded in every target lock (what another process would show)."""
    for lock in dm.glob("lock.*"):
        (lock / "who").write_text(who + "\n")


def _gone_pid() -> tuple[int, int | None]:
    """A pid (and its start time) of a process of ours that has ended."""
    import sys

    from tuner.optuna_io import process_owner

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_owner(child.pid)["start"]
    child.wait()
    return child.pid, start


def test_recover_never_judges_a_live_tuner_dead_and_a_claimed_timer_fails_the_trial(
        setup, tmp_path: Path, reliability) -> None:
    """Red team H4. A live tuner whose pid this machine cannot see (same hostname: another PID
    namespace, or another machine called the same) is not dead: ``recover`` waits and refuses,
    the change stays armed. Only a holder proved gone (same host, boot and PID namespace, pid
    gone) has its armed timer claimed -- and if that ever hits a live tuner, its renewal sees
    ``disarmed`` and the measurement fails as protection lost, never scored."""
    from tuner.errors import ProtectionLost

    dc, fake = setup(timeout_s=3.0)
    dm = tmp_path / "dm"
    dc.apply(trial(17))
    pid, start = _gone_pid()
    parts = dc.who.split()
    parts[1] = str(pid)  # not visible here ...
    if len(parts) > 2:
        parts[3] = str(int(parts[3]) + 1)  # ... because it lives in another PID namespace
    _forge_who(dm, " ".join(parts))
    rec = DeadmanCluster(fake, 3.0, directory=str(dm), renew_every_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(RollbackError, match="dead-man timer is still armed"):
        rec.take_over_locks(wait_s=1.0)
    assert all(Path(t.base + ".armed").exists() for t in dc.armed.values())
    assert values(fake) == [17, 17] and dc.revoked == []

    parts = dc.who.split()  # now a holder proved gone: same namespace, pid gone
    parts[1] = str(pid)
    if len(parts) > 4:
        parts[4] = str(start)
    _forge_who(dm, " ".join(parts))
    assert [ln.split(":")[0] for ln in rec.take_over_locks(wait_s=1.0)] == NICS
    fake.measure_s = 10.0  # the live tuner measures on: its next renewal finds it claimed
    t1 = time.monotonic()
    with pytest.raises(ProtectionLost, match="claimed or target lock taken"):
        dc.measure(None)
    stopped_s = time.monotonic() - t1
    assert stopped_s < 0.3 + 0.5 + 1.0  # one renewal period, a poll, slack
    assert sorted(set(dc.revoked)) == NICS
    dc.apply(dc.baseline)
    assert values(fake) == [300, 300]
    reliability.record(
        "`recover` run while the tuner is alive, the lock's holder pid not visible here (same "
        "hostname, another PID namespace); then a timer claimed under the live tuner",
        f"`recover` refused after its wait (holder not proved dead: host, boot id, PID "
        f"namespace and start time are in the lock), the change stayed armed; with the timer "
        f"claimed the live tuner's measurement stopped in {stopped_s:.1f} s as "
        "`failed:protection_lost` (never scored) and the baseline was restored",
        dirty_targets=sum(v != 300 for v in values(fake)), trials_lost=0,
        restore_s=time.monotonic() - t0, backend="sh (local stand-in)")


def test_a_lock_taken_by_another_token_mid_trial_fails_the_trial(setup, tmp_path: Path) -> None:
    """The target's lock changed hands while this tuner's timer is armed: the renewal says
    ``stolen`` and the measurement fails as protection lost."""
    from tuner.errors import ProtectionLost

    dc, fake = setup(timeout_s=3.0)
    dc.apply(trial(17))
    for lock in (tmp_path / "dm").glob("lock.*"):
        (lock / "owner").unlink()
        (lock / "owner").write_text("someone-else-0123456789ab\n")
    fake.measure_s = 10.0
    with pytest.raises(ProtectionLost):
        dc.measure(None)
    assert sorted(set(dc.revoked)) == NICS
    dc.apply(dc.baseline)
    assert values(fake) == [300, 300]


def test_timeout_zero_keeps_the_locks_and_the_moved_canary_check(setup, reliability) -> None:
    """Red team L2: ``deadman_timeout_s: 0`` turns the timers off, not the rest. A tuner
    without timers is still refused by another tuner's armed locks at its snapshot, and
    never applies a trial on a canary that moved since its baseline."""
    first, fake = setup(timeout_s=1.0)
    first.apply(trial(17))  # armed: the targets' locks are the first tuner's
    plain = DeadmanCluster(fake, 0, directory=first.directory)
    with pytest.raises(DeadmanRefused, match="locked .* armed"):
        plain.snapshot()
    first.apply(first.baseline)  # restored and disarmed: the locks are free
    plain.snapshot()
    for f in fake.files.values():  # a hand change after the snapshot
        f.write_text("55\n")
    with pytest.raises(DeadmanRefused, match="changed since this study read its baseline"):
        plain.apply(trial(42))
    assert values(fake) == [55, 55]
    plain.apply(plain.baseline)  # going back to the baseline is always allowed
    assert values(fake) == [300, 300] and plain.armed == {}
    reliability.record(
        "`deadman_timeout_s: 0` (no timers): a second tuner while the first has a change "
        "armed; then a hand change to the canary after the study's snapshot",
        "the first tuner's locks refused the second at its snapshot; the moved canary refused "
        "the trial's apply (exit 3 path, `DeadmanRefused`), nothing written",
        dirty_targets=0, trials_lost=0, restore_s=None, backend="sh (local stand-in)")
