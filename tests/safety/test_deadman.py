"""The dead-man timer commands, run for real with the local POSIX ``sh`` (dash on Debian)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from safety.deadman import DeadmanTimer, new_token, parse_reply

# A lock holder: host, pid, boot id, PID namespace, start time (tuner.cluster.deadman._who).
WHO = "gpu01 4242 7795d266-d360-4885-974d-fb5878491f97 4026531836 1302157"


def sh(cmd: str, timeout: float = 5.0) -> str:
    """Run like the transport does (a shell on the target); returns stdout, checks rc 0."""
    t0 = time.monotonic()
    res = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr
    # nohup'd timer must not hold our pipes: the arm command returns at once.
    assert time.monotonic() - t0 < 2.0
    return res.stdout


def wait_for(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def knob(tmp_path: Path):
    """A fake knob file on the trial value, the restore that puts the baseline back, and
    clean-up of any timer a failing test left behind."""
    path = tmp_path / "knob with space" / "rpg_time_reset"
    path.parent.mkdir()
    path.write_text("17\n")
    restore = [f"printf '%s\\n' 300 > '{path}'"]
    timers: list[DeadmanTimer] = []
    yield path, restore, timers, tmp_path / "dm"
    for t in timers:
        pidfile = Path(t.base + ".pid")
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def make(tmp_dir: Path, timers: list[DeadmanTimer], target: str = "host0/mlx5_0"
         ) -> DeadmanTimer:
    t = DeadmanTimer.new(target, directory=str(tmp_dir))
    timers.append(t)
    return t


def test_arm_fires_and_restores_after_timeout(knob):
    path, restore, timers, d = knob
    t = make(d, timers)
    out = sh(t.arm_command(restore, 1))
    assert parse_reply(out)[0] == "armed" and t.token in out
    assert path.read_text() == "17\n"  # nothing restored before the deadline
    assert wait_for(Path(t.base + ".fired"), 4.0)
    assert path.read_text() == "300\n"
    assert Path(t.base + ".rc").read_text().strip() == "0"
    assert parse_reply(sh(t.status_command())) == ("fired", "rc=0")
    # a tuner that disarms too late learns that the timer fired
    assert parse_reply(sh(t.disarm_command())) == ("fired", "rc=0")


def test_arm_then_disarm_never_restores(knob):
    path, restore, timers, d = knob
    t = make(d, timers)
    sh(t.arm_command(restore, 1))
    pid = int(Path(t.base + ".pid").read_text())
    assert alive(pid)
    assert parse_reply(sh(t.disarm_command()))[0] == "disarmed"
    time.sleep(2.5)  # well past the deadline
    assert path.read_text() == "17\n"
    assert not alive(pid)
    assert parse_reply(sh(t.status_command()))[0] == "disarmed"
    assert not Path(t.base + ".fired").exists()
    sh(t.cleanup_command())
    assert not Path(t.base + ".disarmed").exists()


def test_renew_postpones_the_restore(knob):
    path, restore, timers, d = knob
    t = make(d, timers)
    sh(t.arm_command(restore, 2))
    for _ in range(3):  # renewed every second for 3 s: the 2 s timer must not fire
        time.sleep(1.0)
        assert parse_reply(sh(t.renew_command(2)))[0] == "renewed"
    assert path.read_text() == "17\n"
    # renewals stop (the tuner died): it fires within the timeout plus one poll
    assert wait_for(Path(t.base + ".fired"), 5.5)
    assert path.read_text() == "300\n"
    assert parse_reply(sh(t.renew_command(2)))[0] == "fired"


def test_two_timers_are_independent_and_a_failed_step_does_not_stop_the_rest(knob):
    path, restore, timers, d = knob
    other = path.parent / "rpg_ai_rate"
    other.write_text("1\n")
    a, b = make(d, timers), make(d, timers, "host1/mlx5_0")
    assert a.token != b.token
    steps = ["false", f"printf '%s\\n' 5 > '{other}'", *restore]
    sh(a.arm_command(steps, 1))
    sh(b.arm_command(["printf x > /dev/null"], 30))
    assert parse_reply(sh(b.disarm_command()))[0] == "disarmed"  # b only
    assert wait_for(Path(a.base + ".fired"), 4.0)
    assert other.read_text() == "5\n" and path.read_text() == "300\n"
    assert parse_reply(sh(a.status_command())) == ("fired", "rc=1")


def test_tokens_and_paths_are_checked():
    assert new_token("host0/mlx5_0").startswith("host0_mlx5_0-")
    with pytest.raises(ValueError):
        DeadmanTimer("h", "a;rm -rf /")
    with pytest.raises(ValueError):
        DeadmanTimer("h", "tok", directory="/tmp/../etc")
    with pytest.raises(ValueError):
        DeadmanTimer.new("h").arm_command([], 5)
    with pytest.raises(ValueError):
        parse_reply("bash: syntax error")


def _doc_example() -> str:
    """The dead-man section of docs/real-cluster.md, regenerated from the code."""
    import yaml

    from tuner.drivers.mlx5_sysfs import Mlx5SysfsDriver
    from tuner.inventory import parse_inventory
    from tuner.settings import DcqcnSettings

    text = DOC.read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    h = parse_inventory(yaml.safe_load(example), "docs/real-cluster.md example").hosts[0]
    restore = Mlx5SysfsDriver(None, h).write_command(  # type: ignore[arg-type]
        DcqcnSettings(rpg_time_reset=150, rpg_ai_rate=20), DcqcnSettings())
    t = DeadmanTimer(h.nic, "gpu01_mlx5_0-5f1c2a9e7b3d")
    out = [f"For host `{h.name}` (OFED sysfs layout), a trial that set `rpg_time_reset=150 "
           f"rpg_ai_rate=20`, a\n60 s timeout and the token `{t.token}`:\n"]
    for title, cmd in (
            ("arm (before the trial's write; prints `armed <token> <pid>`)",
             t.arm_command([restore], 60)),
            ("renew (every timeout/3 while the trial runs; prints `renewed`, `stolen <owner>` "
             "if the lock changed hands, `disarmed` if a `recover` claimed it, or `fired rc=N` "
             "if it is too late)", t.renew_command(60)),
            ("disarm + clean up (after the verified restore; prints `disarmed`, or `fired "
             "rc=N`)", f"{t.disarm_command()}; {t.cleanup_command()}"),
            ("status", t.status_command())):
        out.append(f"- {title}:\n\n  ```sh\n  {cmd}\n  ```\n")
    return "\n".join(out)


DOC = Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md"


def test_docs_show_the_exact_dead_man_commands() -> None:
    shown = DOC.read_text().split("<!-- deadman:start -->\n", 1)[1].split(
        "<!-- deadman:end -->", 1)[0]
    assert shown == _doc_example()
    assert "nohup sh -c" in shown and "printf" in shown


# -- nobody can subvert it ---------------------------------------------------------------------

NOBODY = 65534


@pytest.mark.parametrize("hostile", ["world_writable", "owned_by_nobody", "symlink",
                                     "group_readable"])
def test_hostile_runtime_directory_is_refused(knob, tmp_path: Path, hostile: str) -> None:
    """Another local user pre-created the directory (the /tmp attack): nothing is armed,
    nothing written in it, no timer started -- the arm answers ``unsafe``."""
    path, restore, timers, d = knob
    victim = tmp_path / "root-only"
    victim.write_text("precious\n")
    if hostile == "symlink":
        real = tmp_path / "elsewhere"
        real.mkdir(mode=0o700)
        d.symlink_to(real)
    else:
        d.mkdir()
        os.chmod(d, {"world_writable": 0o1777, "owned_by_nobody": 0o700,
                     "group_readable": 0o750}[hostile])
        if hostile == "owned_by_nobody":
            os.chown(d, NOBODY, NOBODY)
    t = make(d, timers)
    word, why = parse_reply(sh(t.arm_command(restore, 1)))
    assert word == "unsafe" and str(d) in why, why
    for cmd in (t.renew_command(1), t.disarm_command(), t.status_command()):
        assert parse_reply(sh(cmd))[0] == "unsafe"
    listing = sorted(p.name for p in (d.resolve()).iterdir())
    assert listing == []  # not a file, not a lock
    time.sleep(1.5)
    assert path.read_text() == "17\n" and victim.read_text() == "precious\n"


def test_files_are_created_exclusively_never_written_through(knob, tmp_path: Path) -> None:
    """A file planted under the arm's name (here a symlink to a root-only file) makes the arm
    fail instead of writing through it (``set -C``)."""
    path, restore, timers, d = knob
    d.mkdir(mode=0o700)
    victim = tmp_path / "root-only"
    victim.write_text("precious\n")
    t = make(d, timers)
    Path(t.base + ".deadline").symlink_to(victim)
    res = subprocess.run(["sh", "-c", t.arm_command(restore, 1)], capture_output=True,
                         text=True, timeout=5)
    assert res.returncode == 1 and "armed" not in res.stdout  # the transport: arm failed
    assert victim.read_text() == "precious\n"
    assert not Path(t.base + ".armed").exists()


def test_disarm_kills_only_its_own_timer(knob) -> None:
    """A pid planted in ``.pid`` (an unrelated process) is never signalled; the real timer
    loop is stopped at once."""
    path, restore, timers, d = knob
    t = make(d, timers)
    sh(t.arm_command(restore, 30))
    loop = int(Path(t.base + ".pid").read_text())
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        pidfile = Path(t.base + ".pid")
        pidfile.unlink()
        pidfile.write_text(f"{bystander.pid}\n")
        assert parse_reply(sh(t.disarm_command()))[0] == "disarmed"
        time.sleep(0.3)
        assert bystander.poll() is None  # untouched
    finally:
        bystander.kill()
        bystander.wait()
    t2 = make(d, timers, "host1/mlx5_0")
    sh(t2.arm_command(restore, 30))
    loop2 = int(Path(t2.base + ".pid").read_text())
    assert parse_reply(sh(t2.disarm_command()))[0] == "disarmed"
    assert wait_until_gone(loop2, 0.5)  # killed, not left to notice on its next poll
    assert wait_until_gone(loop, 2.0)  # the first loop exits by itself (claim gone)


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_target_lock_one_tuner_per_target(knob) -> None:
    """The arm takes the target's lock: a second arm (another tuner, any machine) is refused
    by the target; a fired timer's lock stays until ``recover`` takes it over."""
    path, restore, timers, d = knob
    a = make(d, timers)
    sh(a.arm_command(restore, 30))
    b = make(d, timers)  # same target, another tuner
    assert parse_reply(sh(b.arm_command(restore, 30))) == ("locked", f"{a.token} armed")
    assert parse_reply(sh(b.takeover_command())) == ("busy", f"{a.token} armed")
    assert parse_reply(sh(a.disarm_command()))[0] == "disarmed"  # releases the lock
    assert parse_reply(sh(b.arm_command(restore, 1)))[0] == "armed"
    assert wait_for(Path(b.base + ".fired"), 4.0)  # b's tuner died: its timer fired
    c = make(d, timers)
    assert parse_reply(sh(c.arm_command(restore, 30))) == ("locked", f"{b.token} fired")
    assert parse_reply(sh(c.takeover_command())) == ("taken", f"{b.token} fired")
    assert parse_reply(sh(c.takeover_command())) == ("free", "")
    assert parse_reply(sh(c.arm_command(restore, 30)))[0] == "armed"
    assert parse_reply(sh(c.disarm_command()))[0] == "disarmed"


def test_recover_claims_the_armed_timer_of_a_known_dead_owner(knob) -> None:
    """A tuner SIGKILLed with its timer armed: a takeover without proof waits (``busy`` with
    the owner's host and pid); with proof (``claim_armed``) the timer is claimed like a
    disarm -- it never fires -- and the lock is free."""
    path, restore, timers, d = knob
    a = DeadmanTimer.new("host0/mlx5_0", directory=str(d), who=WHO)
    timers.append(a)
    sh(a.arm_command(restore, 2))
    loop = int(Path(a.base + ".pid").read_text())
    b = make(d, timers)
    assert parse_reply(sh(b.takeover_command())) == ("busy", f"{a.token} armed {WHO}")
    assert parse_reply(sh(b.takeover_command(claim_armed=True))) == (
        "taken", f"{a.token} armed-claimed")
    assert wait_until_gone(loop, 0.5)
    time.sleep(3.0)  # past a's deadline: it never fires
    assert path.read_text() == "17\n" and not Path(a.base + ".fired").exists()
    assert parse_reply(sh(b.arm_command(restore, 30)))[0] == "armed"
    assert parse_reply(sh(b.disarm_command()))[0] == "disarmed"


def test_no_runtime_directory_yet_is_free_or_missing(knob) -> None:
    """A target never armed (or rebooted: /run is a tmpfs) has no runtime directory: its lock
    is free and a timer there is missing -- not an unsafe directory."""
    path, restore, timers, d = knob
    t = make(d, timers)
    assert parse_reply(sh(t.takeover_command())) == ("free", "")
    for cmd in (t.status_command(), t.renew_command(1), t.disarm_command()):
        assert parse_reply(sh(cmd))[0] == "missing"
    assert not d.exists()  # looking never creates it


# -- the runtime directory outlives the SSH session (red team L2) --------------------------------

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.fixture
def login(tmp_path: Path):
    """A non-root login (``nobody``) on this machine: its home, a logind-style
    ``$XDG_RUNTIME_DIR`` and a knob it may write; ``run(cmd)`` is a command of its SSH session.
    (pytest's own tmp folders are root-only, hence a folder of our own.)"""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="ecntune-login-"))
    home, xdg = top / "home", top / "run-user"
    for p in (home, xdg):
        p.mkdir(mode=0o700)
    knob_file = top / "rpg_time_reset"
    knob_file.write_text("17\n")
    top.chmod(0o755)  # root-owned, like /run/user: a removed run-user cannot be made again
    for p in (home, xdg, knob_file):
        os.chown(p, NOBODY, NOBODY)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_RUNTIME_DIR": str(xdg)}

    def run(cmd: str) -> str:
        res = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                              "--clear-groups", "sh", "-c", cmd], capture_output=True,
                             text=True, timeout=5, env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    yield run, home, xdg, knob_file
    for pid in home.glob(".ecntune-deadman/*/*.pid"):  # no timer outlives the test
        try:
            os.kill(int(pid.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    shutil.rmtree(top, ignore_errors=True)


def test_timer_survives_logind_removing_the_runtime_dir_at_logout(
        login, request: pytest.FixtureRequest) -> None:
    """The tuner's last SSH session ends (it died, or its network dropped) and logind removes
    ``/run/user/<uid>``: the timer lives in the home directory, under this boot's id, and still
    restores the knob at its deadline."""
    run, home, xdg, knob_file = login
    t = DeadmanTimer.new("host0/mlx5_0")
    assert parse_reply(run(t.arm_command([f"printf '%s\\n' 300 > '{knob_file}'"], 1)))[0] \
        == "armed"
    subprocess.run(["rm", "-rf", str(xdg)], check=True)  # logind, at the end of the session
    fired = home / ".ecntune-deadman" / f"boot-{BOOT_ID}" / f"{t.token}.fired"
    t0 = time.monotonic()
    wait_for(fired, 10.0)
    assert knob_file.read_text() == "300\n"
    assert fired.exists()
    from tests.faults.conftest import Recorder

    Recorder(request.node.nodeid).record(
        "the tuner's last SSH session ends and logind removes `$XDG_RUNTIME_DIR` "
        "(`/run/user/<uid>`) under an armed dead-man timer (non-root login)",
        "the timer lives in `~/.ecntune-deadman/boot-<boot id>`, untouched by logind: it fired at "
        "its deadline and restored the knob", dirty_targets=0, trials_lost=0,
        restore_s=time.monotonic() - t0, backend="sh (local login)")


def test_a_previous_boots_leftovers_are_never_trusted(login) -> None:
    """The home directory survives a reboot, the timers and locks in it do not: a lock and an
    ``.armed`` file left by another boot are never read as live (the lock is free, that
    timer is missing) -- only this boot's directory is."""
    run, home, _, knob_file = login
    old = DeadmanTimer.new("host0/mlx5_0")
    base = home / ".ecntune-deadman"
    stale = base / "boot-00000000-0000-0000-0000-000000000000"
    for left in (stale, base):  # another boot's directory, and files loose in the base
        run(f"mkdir -p -m 700 '{left}/lock.host0_mlx5_0' && echo {old.token} "
            f">'{left}/lock.host0_mlx5_0/owner' && : >'{left}/{old.token}.armed' && "
            f"chmod 700 '{base}'")
    assert parse_reply(run(old.renew_command(30)))[0] == "missing"
    new = DeadmanTimer.new("host0/mlx5_0")
    assert parse_reply(run(new.takeover_command())) == ("free", "")
    assert parse_reply(run(new.arm_command([f"printf 300 > '{knob_file}'"], 30)))[0] == "armed"
    assert parse_reply(run(new.disarm_command()))[0] == "disarmed"
    assert (stale / f"{old.token}.armed").exists()  # untouched, never consulted


def test_timer_puts_back_a_removed_directory_and_still_fires(
        knob, request: pytest.FixtureRequest) -> None:
    """Something removes the runtime directory under an armed timer (a cleanup job): the loop
    puts its claim, deadline and lock back instead of exiting silently, and fires on time."""
    path, restore, timers, d = knob
    t = make(d, timers)
    sh(t.arm_command(restore, 2))
    subprocess.run(["rm", "-rf", str(d)], check=True)
    assert wait_for(Path(t.base + ".recreated"), 5.0)
    assert sh(t.holder_command()).split()[:3] == ["held", t.token, "armed"]  # lock back
    assert wait_for(Path(t.base + ".fired"), 10.0)
    assert path.read_text() == "300\n"
    from tests.faults.conftest import Recorder

    Recorder(request.node.nodeid).record(
        "the dead-man runtime directory removed (`rm -rf`) under an armed timer, tuner gone",
        "the timer loop put its claim, deadline and lock back (`.recreated` mark) instead of "
        "exiting silently, and fired on time: knob restored", dirty_targets=0, trials_lost=0,
        restore_s=None, backend="sh (local)")
