"""Dead-man switch (commit-confirm, as on routers): remote commands that restore a target's
baseline by themselves unless the tuner renews or disarms them in time.

Pure: this module only *builds* POSIX ``sh`` command lines; the SSH backend runs them. Nothing
is installed on the target: the timer is a ``nohup sh -c '<loop>'`` process plus a few files in
``directory`` (default ``/tmp/ecntune-deadman``), one set per arm, named by a unique *token*::

    <token>.armed     exists while the timer may fire; its removal is the one atomic claim
    <token>.deadline  epoch second after which the timer fires (renew rewrites it)
    <token>.pid       pid of the timer loop (disarm stops it early; not needed for safety)
    <token>.firing    the timer won the claim and is restoring
    <token>.fired     the restore ran; <token>.rc holds its exit status, <token>.log its output
    <token>.disarmed  the tuner won the claim: the timer exits without touching anything

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
* the unique token: renew/disarm touch exactly this arm's timer, never another run's; a stale
  timer from a killed run keeps its own token and its own baseline.
* ``date +%s``: epoch seconds (GNU coreutils, BusyBox and BSD ``date`` all print it); the
  remaining commands (``sh``, ``mkdir``, ``mv``, ``cat``, ``sleep``, ``kill``) are POSIX. The
  deadline has one-second resolution, so the timer fires when the clock is *past* it
  (``-gt``): never earlier than ``timeout_s`` after the last renewal, at most ~2 s later
  (resolution plus the one-second poll).
* every restore command runs in its own subshell (``( ... ) || rc=1``): a ``cd`` in one does
  not move the next, and one refused write does not stop the others from putting their knobs
  back; the overall status lands in ``<token>.rc``, the output in ``<token>.log``.

Replies: every command prints one status word on its first line (``armed``, ``renewed``,
``disarmed``, ``fired``, ``firing``, ``missing``) and exits 0, so the transport's exit-status
check only trips on real failures (``parse_reply`` turns the word into a ``TimerState``).
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass
from typing import Literal

DEFAULT_DIR = "/tmp/ecntune-deadman"
TimerState = Literal["armed", "renewed", "disarmed", "fired", "firing", "missing"]
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_TOKEN = re.compile(r"^[A-Za-z0-9_.-]{1,96}$")
_DIR = re.compile(r"^/[A-Za-z0-9_./-]*$")
_STATES: tuple[TimerState, ...] = ("armed", "renewed", "disarmed", "fired", "firing", "missing")


def new_token(target: str) -> str:
    """``<target, made file-name safe>-<12 random hex digits>``."""
    return f"{_SAFE.sub('_', target)[:64]}-{secrets.token_hex(6)}"


@dataclass(frozen=True)
class DeadmanTimer:
    """The commands of one arm of one target's timer (see the module docstring)."""

    target: str
    token: str
    directory: str = DEFAULT_DIR

    def __post_init__(self) -> None:
        if not _TOKEN.fullmatch(self.token):
            raise ValueError(f"dead-man token {self.token!r} is not [A-Za-z0-9_.-]{{1,96}}")
        if not _DIR.fullmatch(self.directory) or ".." in self.directory.split("/"):
            raise ValueError(f"dead-man directory {self.directory!r} is not a plain absolute "
                             "path")

    @classmethod
    def new(cls, target: str, directory: str = DEFAULT_DIR) -> DeadmanTimer:
        return cls(target=target, token=new_token(target), directory=directory)

    @property
    def base(self) -> str:
        return f"{self.directory.rstrip('/')}/{self.token}"

    def _f(self, suffix: str) -> str:
        return shlex.quote(f"{self.base}.{suffix}")

    def loop_script(self, restore: list[str]) -> str:
        """The timer itself (run by ``sh -c``): wait for the deadline, claim, restore."""
        if not restore:
            raise ValueError(f"{self.target}: no restore commands for the dead-man timer")
        steps = "; ".join(f"( {cmd} ) || rc=1" for cmd in restore)
        return (
            f"while :; do "
            f"[ -e {self._f('armed')} ] || exit 0; "
            f"dl=$(cat {self._f('deadline')} 2>/dev/null) || exit 0; "
            f"[ \"$(date +%s)\" -gt \"$dl\" ] && break; "
            f"sleep 1; done; "
            f"mv {self._f('armed')} {self._f('firing')} 2>/dev/null || exit 0; "
            f"rc=0; {{ {steps}; }} >{self._f('log')} 2>&1; "
            f"echo \"$rc\" >{self._f('rc')}; "
            f"mv {self._f('firing')} {self._f('fired')}")

    def arm_command(self, restore: list[str], timeout_s: float) -> str:
        """Start the timer: it restores with ``restore`` unless renewed within ``timeout_s``."""
        seconds = max(1, int(round(timeout_s)))
        script = self.loop_script(restore)
        # The files are written before the loop starts (the loop exits at once without them),
        # and the ``&`` applies to the nohup command alone, not to the set-up list.
        return (
            f"umask 077 && mkdir -p {shlex.quote(self.directory)} && "
            f"echo $(( $(date +%s) + {seconds} )) >{self._f('deadline')} && "
            f": >{self._f('armed')} || exit 1; "
            f"nohup sh -c {shlex.quote(script)} >/dev/null 2>&1 </dev/null & "
            f"echo $! >{self._f('pid')}; echo armed {shlex.quote(self.token)} $!")

    def renew_command(self, timeout_s: float) -> str:
        """Push the deadline ``timeout_s`` into the future (only while still armed)."""
        seconds = max(1, int(round(timeout_s)))
        return (
            f"if [ -e {self._f('armed')} ]; then "
            f"echo $(( $(date +%s) + {seconds} )) >{self._f('deadline.new')} && "
            f"mv {self._f('deadline.new')} {self._f('deadline')} && echo renewed; "
            f"else {self._state_words()}; fi")

    def disarm_command(self) -> str:
        """Claim the timer so it can never fire, then stop its loop early."""
        return (
            f"if mv {self._f('armed')} {self._f('disarmed')} 2>/dev/null; then "
            f"kill $(cat {self._f('pid')} 2>/dev/null) 2>/dev/null; echo disarmed; "
            f"else {self._state_words()}; fi")

    def status_command(self) -> str:
        return f"if [ -e {self._f('armed')} ]; then echo armed; else {self._state_words()}; fi"

    def _state_words(self) -> str:
        return (f"if [ -e {self._f('fired')} ]; then echo fired rc=$(cat {self._f('rc')} "
                f"2>/dev/null); elif [ -e {self._f('firing')} ]; then echo firing; "
                f"elif [ -e {self._f('disarmed')} ]; then echo disarmed; else echo missing; fi")

    def cleanup_command(self) -> str:
        """Remove this arm's files once it is disarmed or fired (keeps nothing pending)."""
        files = " ".join(self._f(s) for s in ("deadline", "pid", "disarmed", "fired", "rc",
                                              "log"))
        return f"[ -e {self._f('armed')} ] || [ -e {self._f('firing')} ] || rm -f {files}"


def parse_reply(stdout: str) -> tuple[TimerState, int | None]:
    """``("fired", 0)`` from ``fired rc=0``; raises ``ValueError`` on anything unexpected."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    word, _, rest = first.partition(" ")
    if word not in _STATES:
        raise ValueError(f"unexpected dead-man reply {first!r}")
    rc = None
    m = re.search(r"rc=(\d+)", rest)
    if m:
        rc = int(m.group(1))
    return word, rc  # type: ignore[return-value]
