"""Dead-man switch (commit-confirm, as on routers): remote commands that restore a target's
baseline by themselves unless the tuner renews or disarms them in time.

Pure: this module only *builds* POSIX ``sh`` command lines; the SSH backend runs them. Nothing
is installed on the target: the timer is a ``nohup sh -c '<loop>'`` process plus a few files in
a *runtime directory* ``$d``, one set per arm, named by a unique *token*::

    <token>.armed     exists while the timer may fire; its removal is the one atomic claim
    <token>.deadline  epoch second after which the timer fires (renew rewrites it)
    <token>.pid       pid of the timer loop (disarm stops it early; not needed for safety)
    <token>.firing    the timer won the claim and is restoring
    <token>.fired     the restore ran; <token>.rc holds its exit status, <token>.log its output
    <token>.disarmed  the tuner won the claim: the timer exits without touching anything
    lock.<target>/    the target's lock (``owner``: the token; ``who``: the tuner process)

The runtime directory (``RUNTIME_DIR``): ``/run/ecntune/boot-<boot id>`` for root (``sudo``),
``~/.ecntune-deadman/boot-<boot id>`` for others -- never ``$XDG_RUNTIME_DIR``
(``/run/user/<uid>``), which systemd-logind removes when the user's last session ends, i.e. exactly
when the tuner died or lost its network and the timer is needed; never a world-writable place such
as ``/tmp``. The boot id (``/proc/sys/kernel/random/boot_id``) in the name means a previous boot's
leftovers in the home directory (``.armed`` files of timers that died with that boot, its locks)
are never read as live. If the directory is removed anyway, the timer loop puts its ``.armed``,
deadline and lock back (and a ``.recreated`` mark) and keeps guarding; a renewal that came in
between answered ``missing``, which fails the trial. Every command refuses to touch the directory
and its base (reply ``unsafe``) unless it is a real directory (not a symlink) owned by the
connecting user with mode 0700, so another local user can neither plant files or symlinks in it
nor read it. Files are created with ``set -C`` (noclobber: an existing file is never written
through) under ``umask 077``, and the pid in ``<token>.pid`` is killed only if that process's
command line carries this arm's marker (``ecntune-deadman <token>``), so a planted pid can never
make root signal another process.

Why each piece is there:

* ``nohup ... >/dev/null 2>&1 </dev/null &``: the timer must outlive the SSH session (sshd's
  session ends when the tuner dies or the network drops) and must not hold the session's
  stdout/stderr, or sshd would wait for it and the arm command would never return.
* a deadline file polled every second instead of ``sleep N``: *renew* is then a plain atomic
  file replace (write a temporary file, ``mv`` it over the deadline), with no kill/re-spawn race
  in which two timers, or none, would be alive.
* ``mv <token>.armed <token>.firing`` (timer) versus ``mv <token>.armed <token>.disarmed``
  (tuner): ``rename(2)`` is atomic, so exactly one side wins. A disarmed timer can never fire
  later, and a tuner that lost the race learns (``fired``/``firing``) that the target was
  restored behind its back, so it reads the target back instead of trusting its own state.
* a renewal that finds no timer (``missing``: the target rebooted -- the runtime directory is a
  tmpfs -- or someone removed the files) means the change is no longer protected: the tuner
  stops the trial and restores at once (``tuner.cluster.deadman``).
* the target lock (``mkdir`` is atomic): taken by the arm, released by the disarm that won the
  claim; a second tuner -- on any machine -- is refused by the target itself (reply
  ``locked <owner token> <owner state>``). A fired timer leaves its lock behind: the tuner that
  owned it is gone, and only ``ecntune recover`` takes such a lock over (``takeover_command``,
  refused while the owner's timer is still armed -- unless ``recover`` proves that owner dead:
  ``who`` is ``<host> <pid> <boot id> <pid namespace> <start time>``, and only on the same host,
  boot and PID namespace a pid that is gone (or now another, later process) is a dead owner;
  then it claims that timer first, exactly like a disarm).
* a renewal that finds the timer ``disarmed`` (a ``recover`` judged this tuner dead) or the
  lock in another token's hands (``stolen``) means the change is no longer the tuner's to
  measure: the trial fails (``failed:protection_lost``) and is never scored.
* the unique token: renew/disarm touch exactly this arm's timer, never another run's; a stale
  timer from a killed run keeps its own token and its own baseline.
* ``date +%s``: epoch seconds (GNU coreutils, BusyBox and BSD ``date`` all print it); the
  remaining commands (``sh``, ``mkdir``, ``mv``, ``cat``, ``ls``, ``ps``, ``id``, ``sleep``,
  ``kill``) are POSIX. The deadline has one-second resolution, so the timer fires when the clock
  is *past* it (``-gt``): never earlier than ``timeout_s`` after the last renewal, at most ~2 s
  later (resolution plus the one-second poll).
* every restore command runs in its own subshell (``( ... ) || rc=1``): a ``cd`` in one does
  not move the next, and one refused write does not stop the others from putting their knobs
  back; the overall status lands in ``<token>.rc``, the output in ``<token>.log``.

Replies: every command prints one status word on its first line (``armed``, ``renewed``,
``disarmed``, ``fired``, ``firing``, ``missing``, ``unsafe``, ``locked``, ``taken``, ``free``,
``busy``, ``stolen``) and exits 0, so the transport's exit-status check only trips on real failures
(``parse_reply`` turns the word into a ``TimerState`` and the rest of the line).
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass
from typing import Literal

TimerState = Literal["armed", "renewed", "disarmed", "fired", "firing", "missing", "unsafe",
                     "locked", "taken", "free", "busy", "stolen"]
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_TOKEN = re.compile(r"^[A-Za-z0-9_.-]{1,96}$")
_DIR = re.compile(r"^/[A-Za-z0-9_./-]*$")
# <host> <pid> <boot id> <pid namespace inode> <start time in clock ticks since boot>
_WHO = re.compile(r"[A-Za-z0-9_.-]{1,64} [0-9]{1,10} [0-9a-f-]{1,36} [0-9]{1,20} [0-9]{1,20}")
_STATES: tuple[TimerState, ...] = ("armed", "renewed", "disarmed", "fired", "firing", "missing",
                                   "unsafe", "locked", "taken", "free", "busy", "stolen")
MARK = "ecntune-deadman"

# The runtime directory, decided on the target (see the module docstring): ``$b`` the base
# (checked too when it is ours to make), ``$d`` this boot's directory in it.
# ``ECNTUNE_DEADMAN_DIR`` places it explicitly (the emulated targets: one per target).
RUNTIME_DIR = ('if [ -n "${ECNTUNE_DEADMAN_DIR:-}" ]; then b=; d="$ECNTUNE_DEADMAN_DIR/ecntune"; '
               'else if [ "$(id -u)" = 0 ]; then b=/run/ecntune; '
               'else b="${HOME:-/nonexistent}/.ecntune-deadman"; fi; '
               'k=$(tr -cd 0-9a-f- </proc/sys/kernel/random/boot_id 2>/dev/null); '
               'd="$b/boot-${k:-unknown}"; fi')


def _check(var: str) -> str:
    """Refuse anything but a real 0700 directory owned by us (``ls -ldn``: mode, links, uid,
    ...; a trailing ``.`` is an SELinux context, a ``+`` an ACL that could let others in)."""
    return (f'set -- $(ls -ldn "${var}" 2>/dev/null); case "$1" in drwx------|drwx------.) ;; '
            f'*) echo "unsafe ${var} is not a 0700 directory (mode ${{1:-none}})"; exit 0;; '
            f'esac; [ "$3" = "$(id -u)" ] || {{ echo "unsafe ${var} is owned by uid $3, not '
            f'$(id -u)"; exit 0; }}')


_CHECK = f'if [ -n "${{b:-}}" ]; then {_check("b")}; fi; {_check("d")}'


def new_token(target: str) -> str:
    """``<target, made file-name safe>-<12 random hex digits>``."""
    return f"{_SAFE.sub('_', target)[:64]}-{secrets.token_hex(6)}"


@dataclass(frozen=True)
class DeadmanTimer:
    """The commands of one arm of one target's timer (see the module docstring).

    ``directory`` pins the runtime directory (tests); ``None`` lets the target pick it.
    """

    target: str
    token: str
    directory: str | None = None
    who: str = ""  # the tuner process (``_WHO``), kept in the target lock

    def __post_init__(self) -> None:
        if self.who and not _WHO.fullmatch(self.who):
            raise ValueError(f"dead-man owner {self.who!r} is not '<host> <pid> <boot> "
                             "<pidns> <start>'")
        if not _TOKEN.fullmatch(self.token):
            raise ValueError(f"dead-man token {self.token!r} is not [A-Za-z0-9_.-]{{1,96}}")
        if self.directory is not None and (
                not _DIR.fullmatch(self.directory) or ".." in self.directory.split("/")):
            raise ValueError(f"dead-man directory {self.directory!r} is not a plain absolute "
                             "path")

    @classmethod
    def new(cls, target: str, directory: str | None = None, who: str = "") -> DeadmanTimer:
        return cls(target=target, token=new_token(target), directory=directory, who=who)

    @property
    def base(self) -> str:
        """``<directory>/<token>`` (only with a pinned ``directory``; tests look at the files)."""
        if self.directory is None:
            raise ValueError("the runtime directory is decided on the target")
        return f"{self.directory.rstrip('/')}/{self.token}"

    def _f(self, suffix: str) -> str:
        return f'"$d"/{self.token}.{suffix}'

    @property
    def _lock(self) -> str:
        return f'"$d"/lock.{_SAFE.sub("_", self.target)[:64]}'

    def _prologue(self, create: bool = False, absent: str = "missing") -> str:
        """Find and check the runtime directory; without one (never armed here, or the
        target rebooted) a command that only looks answers ``absent`` at once."""
        where = (RUNTIME_DIR if self.directory is None
                 else f"b=; d={shlex.quote(self.directory.rstrip('/') or '/')}")
        make = ('[ -z "$b" ] || mkdir -m 700 "$b" 2>/dev/null; mkdir -m 700 "$d" 2>/dev/null; '
                if create else
                f'if [ ! -e "$d" ] && [ ! -L "$d" ]; then echo {absent}; exit 0; fi; ')
        return f"umask 077; set -C; {where}; {make}{_CHECK}; "

    def loop_script(self, restore: list[str]) -> str:
        """The timer itself (``sh -c SCRIPT MARK DIR DEADLINE``): wait for the deadline, claim,
        restore.

        Starts with its marker, so disarm can tell this process from any other."""
        if not restore:
            raise ValueError(f"{self.target}: no restore commands for the dead-man timer")
        # the restore writes existing files (sysfs): noclobber is for our own files only
        steps = "; ".join(f"( set +C; {cmd} ) || rc=1" for cmd in restore)
        return (
            f": {MARK} {self.token}; set -C; umask 077; d=$1; dl=$2; "
            f"while :; do "
            f"if [ ! -d \"$d\" ] && [ -n \"$dl\" ]; then "  # removed under it: put it back
            f"mkdir -p \"$d\" && : >{self._f('armed')} && echo \"$dl\" >{self._f('deadline')} "
            f"&& : >{self._f('recreated')}; mkdir {self._lock} 2>/dev/null && "
            f"echo {self.token} >{self._lock}/owner; fi; "
            # claimed (disarm) -- unless it is the directory going away (``rm -r`` empties it
            # first): look again a second later
            f"[ -e {self._f('armed')} ] || {{ sleep 1; [ -d \"$d\" ] && exit 0; continue; }}; "
            f"n=$(cat {self._f('deadline')} 2>/dev/null) || "
            f"{{ sleep 1; [ -d \"$d\" ] && exit 0; continue; }}; dl=$n; "
            f"[ \"$(date +%s)\" -gt \"$dl\" ] && break; "
            f"sleep 1; done; "
            f"mv {self._f('armed')} {self._f('firing')} 2>/dev/null || exit 0; "
            f"rc=0; {{ {steps}; }} >{self._f('log')} 2>&1; "
            f"echo \"$rc\" >{self._f('rc')}; "
            f"mv {self._f('firing')} {self._f('fired')}")

    def arm_command(self, restore: list[str], timeout_s: float) -> str:
        """Take the target's lock and start the timer: it restores with ``restore`` unless
        renewed within ``timeout_s``."""
        seconds = max(1, int(round(timeout_s)))
        script = self.loop_script(restore)
        # The files are written before the loop starts (the loop exits at once without them),
        # and the ``&`` applies to the nohup command alone, not to the set-up list.
        return (
            f"{self._prologue(create=True)}"
            f"if mkdir {self._lock} 2>/dev/null; then echo {self.token} >{self._lock}/owner; "
            f"echo {shlex.quote(self.who)} >{self._lock}/who; "
            f"else o=$(cat {self._lock}/owner 2>/dev/null); "
            f"echo locked \"${{o:-?}}\" $({self._owner_state('$o')}); exit 0; fi; "
            f"echo $(( $(date +%s) + {seconds} )) >{self._f('deadline')} && "
            f": >{self._f('armed')} || exit 1; "
            f"nohup sh -c {shlex.quote(script)} {MARK} \"$d\" \"$(cat {self._f('deadline')})\" "
            f">/dev/null 2>&1 </dev/null & "
            f"echo $! >{self._f('pid')}; echo armed {self.token} $!")

    def renew_command(self, timeout_s: float) -> str:
        """Push the deadline ``timeout_s`` into the future (only while still armed); ``stolen
        <owner>`` when the target's lock is no longer this arm's (the timer is renewed all the
        same: it still guards this change until the tuner restores and disarms)."""
        seconds = max(1, int(round(timeout_s)))
        return (
            f"{self._prologue()}"
            f"if [ -e {self._f('armed')} ]; then rm -f {self._f('deadline.new')}; "
            f"echo $(( $(date +%s) + {seconds} )) >{self._f('deadline.new')} && "
            f"mv -f {self._f('deadline.new')} {self._f('deadline')} || exit 1; "
            f"o=$(cat {self._lock}/owner 2>/dev/null); if [ \"$o\" = {self.token} ]; then "
            f"echo renewed; else echo stolen \"${{o:-none}}\"; fi; "
            f"else {self._state_words()}; fi")

    def disarm_command(self) -> str:
        """Claim the timer so it can never fire, stop its loop early, release the lock."""
        return (
            f"{self._prologue()}"
            f"if mv {self._f('armed')} {self._f('disarmed')} 2>/dev/null; then "
            f"{self._stop_loop()}; {self._release()}; echo disarmed; "
            f"else {self._state_words()}; if [ -e {self._f('fired')} ]; then "
            f"{self._release()}; fi; fi")

    def _stop_loop(self, token: str | None = None) -> str:
        """Kill the pid in ``.pid`` only if it is a number and that process is this timer."""
        tok = token or self.token
        return (f"p=$(cat \"$d/{tok}.pid\" 2>/dev/null); case \"$p\" in ''|*[!0-9]*) p=;; "
                f"esac; if [ -n \"$p\" ]; then case \"$(ps -o args= -p \"$p\" 2>/dev/null)\" in "
                f"*\"{MARK} {tok}\"*) kill \"$p\" 2>/dev/null;; esac; fi")

    def _release(self, token: str | None = None) -> str:
        tok = token or self.token
        return (f"if [ \"$(cat {self._lock}/owner 2>/dev/null)\" = \"{tok}\" ]; then "
                f"rm -f {self._lock}/owner {self._lock}/who; rmdir {self._lock}; fi")

    @staticmethod
    def _owner_state(owner: str) -> str:
        f = f'"$d"/"{owner}"'
        return (f"if [ -e {f}.armed ]; then echo armed; elif [ -e {f}.firing ]; then "
                f"echo firing; elif [ -e {f}.fired ]; then echo fired; else echo expired; fi")

    def holder_command(self) -> str:
        """Who holds the target's lock, read only: ``free``, or ``held <token> <state>
        <who>`` (state as in ``locked``: armed, firing, fired or expired)."""
        return (f"{self._prologue(absent='free')}"
                f"[ -d {self._lock} ] || {{ echo free; exit 0; }}; "
                f"o=$(cat {self._lock}/owner 2>/dev/null); "
                f"echo held \"${{o:-?}}\" $({self._owner_state('$o')}) "
                f"$(cat {self._lock}/who 2>/dev/null)")

    def status_command(self) -> str:
        return (f"{self._prologue()}if [ -e {self._f('armed')} ]; then echo armed; "
                f"else {self._state_words()}; fi")

    def _state_words(self) -> str:
        return (f"if [ -e {self._f('fired')} ]; then echo fired rc=$(cat {self._f('rc')} "
                f"2>/dev/null); elif [ -e {self._f('firing')} ]; then echo firing; "
                f"elif [ -e {self._f('disarmed')} ]; then echo disarmed; else echo missing; fi")

    def cleanup_command(self) -> str:
        """Remove this arm's files once it is disarmed or fired (keeps nothing pending)."""
        files = " ".join(self._f(s) for s in ("deadline", "pid", "disarmed", "fired", "rc",
                                              "log"))
        return (f"{self._prologue(absent='')}[ -e {self._f('armed')} ] || "
                f"[ -e {self._f('firing')} ] "
                f"|| rm -f {files}")

    def takeover_command(self, claim_armed: bool = False) -> str:
        """``recover``: take over the target's lock from a tuner that is gone (its timer no
        longer armed); ``busy <token> <state> <who>`` while that timer may still fire,
        ``free`` without a lock. ``claim_armed`` (the owner is known dead): claim its armed
        timer first, as its disarm would have."""
        claim = (f"armed) if mv \"$d\"/\"$o\".armed \"$d\"/\"$o\".disarmed 2>/dev/null; then "
                 f"{self._stop_loop('$o')}; {self._release('$o')}; echo taken \"$o\" "
                 f"armed-claimed; else echo busy \"$o\" firing; fi;; firing) "
                 if claim_armed else "armed|firing) ")
        return (
            f"{self._prologue(absent='free')}"
            f"[ -d {self._lock} ] || {{ echo free; exit 0; }}; "
            f"o=$(cat {self._lock}/owner 2>/dev/null); s=$({self._owner_state('$o')}); "
            f"case $s in {claim}echo busy \"${{o:-?}}\" $s $(cat {self._lock}/who 2>/dev/null);; "
            f"*) rm -f {self._lock}/owner {self._lock}/who; "
            f"rmdir {self._lock} && echo taken \"${{o:-?}}\" $s;; esac")


def parse_reply(stdout: str) -> tuple[TimerState, str]:
    """``("fired", "rc=0")`` from ``fired rc=0``; raises ``ValueError`` on anything unexpected.

    The second item is the rest of the line (``rc=N``, the owner of a lock, why a directory is
    unsafe)."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    word, _, rest = first.partition(" ")
    if word not in _STATES:
        raise ValueError(f"unexpected dead-man reply {first!r}")
    return word, rest.strip()  # type: ignore[return-value]
