"""SSH transport over paramiko: the only module of ecntune that imports paramiko.

One reusable connection per target (``Connection``), a bounded fan-out over many targets that
returns one outcome per target (``fan_out``), per-command timeouts enforced on both ends
(``shell.wrap``), exit status and stderr checked on every command, connection retries with
back-off, and host keys verified against known_hosts (paramiko's ``RejectPolicy``; trust on
first use only when the inventory asks for it; a changed key is always refused).

Thread safety: one ``Connection`` may run several commands at once (paramiko multiplexes
channels over one transport); connecting is serialised per connection.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import paramiko

from tuner.errors import TunerError
from tuner.ssh.shell import wrap

if TYPE_CHECKING:
    from pydantic import SecretStr

log = logging.getLogger(__name__)

T = TypeVar("T")


class SshError(TunerError):
    """A connection or a remote command failed; ``target`` names the inventory entry."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(f"{target}: {message}")
        self.target = target


class HostKeyError(SshError):
    """The host key is unknown (and TOFU is off) or differs from known_hosts."""


class CommandError(SshError):
    """A remote command exited nonzero, timed out or lost its connection."""

    def __init__(self, target: str, command: str, status: int | None, stderr: str,
                 reason: str = "", *, started: bool = True) -> None:
        why = reason or f"exit status {status}"
        tail = stderr.strip().splitlines()[-3:] if stderr.strip() else []
        detail = f": {' | '.join(tail)}" if tail else ""
        super().__init__(target, f"`{_short(command)}` failed ({why}){detail}")
        self.command = command
        self.status = status
        self.stderr = stderr
        self.reason = why
        self.started = started  # False: it never reached the target (nothing ran)


def _short(command: str, limit: int = 160) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach one target. Secrets are ``SecretStr`` and never logged."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    password: SecretStr | None = None
    key_passphrase: SecretStr | None = None
    sudo: bool = False
    known_hosts: str = "~/.ssh/known_hosts"
    trust_on_first_use: bool = False
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 120.0
    connect_retries: int = 3
    retry_backoff_s: float = 0.5

    def __repr__(self) -> str:  # never show secrets, even by accident
        return f"Endpoint({self.name}={self.user}@{self.address}:{self.port})"


@dataclass(frozen=True)
class Result:
    """What one remote command returned."""

    target: str
    command: str
    status: int
    stdout: str
    stderr: str
    elapsed_s: float


class _TofuPolicy(paramiko.MissingHostKeyPolicy):
    """Trust on first use: accept an unknown key, remember it in the known_hosts file."""

    def __init__(self, path: str, lock: threading.Lock) -> None:
        self.path = path
        self.lock = lock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        with self.lock:
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a", encoding="ascii") as fh:
                fh.write(line)
        log.warning("trust on first use: added %s key %s for %s to %s", key.get_name(),
                    fingerprint(key), hostname, self.path)


_KNOWN_HOSTS_LOCK = threading.Lock()


class Connection:
    """One reusable SSH connection to one target; reconnects when the transport dropped."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def connected(self) -> bool:
        client = self._client
        if client is None:
            return False
        transport = client.get_transport()
        return transport is not None and transport.is_active()

    def connect(self) -> None:
        """Open the connection (no-op when open), retrying transient failures with back-off."""
        with self._lock:
            if self.connected:
                return
            if self._client is not None:
                self._client.close()
                self._client = None
            ep = self.endpoint
            last: Exception | None = None
            for attempt in range(max(1, ep.connect_retries)):
                if attempt:
                    time.sleep(ep.retry_backoff_s * (2 ** (attempt - 1)))
                try:
                    self._client = self._open()
                    return
                except (HostKeyError, paramiko.AuthenticationException) as exc:
                    if isinstance(exc, HostKeyError):
                        raise
                    raise SshError(ep.name, f"authentication failed for {ep.user}@"
                                   f"{ep.address}:{ep.port}: {exc}") from None
                except (OSError, paramiko.SSHException, EOFError) as exc:
                    last = exc
                    log.info("%s: connect attempt %d failed: %s", ep.name, attempt + 1, exc)
            raise SshError(ep.name, f"cannot connect to {ep.address}:{ep.port} after "
                           f"{max(1, ep.connect_retries)} attempts: {last}")

    def _open(self) -> paramiko.SSHClient:
        ep = self.endpoint
        known = os.path.expanduser(ep.known_hosts)
        client = paramiko.SSHClient()
        if os.path.exists(known):
            client.load_host_keys(known)
        if ep.trust_on_first_use:
            client.set_missing_host_key_policy(_TofuPolicy(known, _KNOWN_HOSTS_LOCK))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                ep.address, port=ep.port, username=ep.user, key_filename=ep.key_file,
                password=ep.password.get_secret_value() if ep.password else None,
                passphrase=ep.key_passphrase.get_secret_value() if ep.key_passphrase else None,
                timeout=ep.connect_timeout_s, banner_timeout=ep.connect_timeout_s,
                auth_timeout=ep.connect_timeout_s, allow_agent=ep.key_file is None,
                look_for_keys=ep.key_file is None,  # no key_file: agent, then ~/.ssh/id_*
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                ep.name, f"host key for {ep.address}:{ep.port} CHANGED: server offers "
                f"{exc.key.get_name()} {fingerprint(exc.key)}, {known} has "
                f"{fingerprint(exc.expected_key)}; refusing to connect (remove the old entry "
                f"with `ssh-keygen -R` only if the change is expected)") from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise HostKeyError(
                    ep.name, f"host key for {ep.address}:{ep.port} is not in {known}; add it "
                    f"(ssh-keyscan) or set ssh.trust_on_first_use: true") from None
            raise
        except Exception:
            client.close()
            raise
        return client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _transport(self) -> paramiko.Transport:
        self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        if transport is None:  # pragma: no cover - connect() guarantees one
            raise SshError(self.name, "no transport")
        return transport

    def run(self, command: str, *, timeout_s: float | None = None, check: bool = True,
            sudo: bool | None = None, retry_dropped: bool = True) -> Result:
        """Run one command; raise ``CommandError`` on nonzero exit, timeout or lost link.

        ``retry_dropped`` reconnects once and reruns when the connection had dropped before
        the command could start (our commands are idempotent reads and absolute writes).
        """
        proc = self.start(command, timeout_s=timeout_s, sudo=sudo, pid=False,
                          retry_dropped=retry_dropped)
        return proc.wait(check=check)

    def start(self, command: str, *, timeout_s: float | None = None, sudo: bool | None = None,
              pid: bool = True, retry_dropped: bool = True) -> RemoteProcess:
        """Start a command and return at once; ``RemoteProcess.wait``/``kill`` finish it."""
        ep = self.endpoint
        limit = ep.command_timeout_s if timeout_s is None else timeout_s
        line = wrap(command, limit, sudo=ep.sudo if sudo is None else sudo, pid=pid)
        for attempt in (0, 1):
            try:
                chan = self._transport().open_session(timeout=ep.connect_timeout_s)
                chan.exec_command(line)
                break
            except (OSError, paramiko.SSHException, EOFError) as exc:
                if attempt or not retry_dropped:
                    raise CommandError(self.name, command, None, "",
                                       f"connection lost: {exc}", started=False) from None
                log.info("%s: connection dropped (%s); reconnecting", self.name, exc)
                self.close()
        return RemoteProcess(self, command, chan, limit + 10.0, pid=pid,
                             sudo=ep.sudo if sudo is None else sudo)


class RemoteProcess:
    """A command running on a target: read its output, wait for it, or stop it."""

    def __init__(self, conn: Connection, command: str, chan: paramiko.Channel,
                 deadline_s: float, *, pid: bool, sudo: bool) -> None:
        self.conn = conn
        self.command = command
        self.chan = chan
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.sudo = sudo
        self._want_pid = pid
        self.pid: int | None = None
        self._out = bytearray()
        self._err = bytearray()
        self._done: Result | None = None
        self._lock = threading.Lock()

    def _pump(self, until: float) -> bool:
        """Read whatever is available until the channel closes or ``until``; True if closed."""
        chan = self.chan
        while True:
            while chan.recv_ready():
                self._out += chan.recv(65536)
            while chan.recv_stderr_ready():
                self._err += chan.recv_stderr(65536)
            if self._want_pid and self.pid is None and b"\n" in self._out:
                first, _, rest = bytes(self._out).partition(b"\n")
                if first.strip().isdigit():
                    self.pid = int(first)
                    self._out = bytearray(rest)
                self._want_pid = False
            if chan.eof_received and chan.exit_status_ready() and not chan.recv_ready() \
                    and not chan.recv_stderr_ready():
                return True
            if chan.closed and not chan.recv_ready() and not chan.recv_stderr_ready():
                return True
            left = until - time.monotonic()
            if left <= 0:
                return False
            if chan.eof_received:  # output done; the pipe stays readable: wait for the status
                chan.status_event.wait(min(left, 0.5))
            else:
                select.select([chan], [], [], min(left, 0.5))

    def wait(self, *, check: bool = True, timeout_s: float | None = None) -> Result:
        """Wait for the end; stdout and stderr are drained before the exit status is read."""
        with self._lock:
            if self._done is None:
                until = self.deadline if timeout_s is None else min(
                    self.deadline, time.monotonic() + timeout_s)
                try:
                    closed = self._pump(until)
                except (TimeoutError, OSError, paramiko.SSHException, EOFError) as exc:
                    raise CommandError(self.conn.name, self.command, None, self._err_text(),
                                       f"connection lost: {exc}") from None
                if not closed:
                    self.chan.close()
                    raise CommandError(self.conn.name, self.command, None, self._err_text(),
                                       "no answer before the local deadline")
                if not self.chan.status_event.wait(max(0.1, self.deadline - time.monotonic())):
                    raise CommandError(self.conn.name, self.command, None, self._err_text(),
                                       "connection lost before the exit status")
                status = self.chan.recv_exit_status()
                self.chan.close()
                if status == -1:  # paramiko: closed without an exit status (link dropped)
                    raise CommandError(self.conn.name, self.command, None, self._err_text(),
                                       "connection lost before the exit status")
                self._done = Result(self.conn.name, self.command, status,
                                    self._out.decode(errors="replace"), self._err_text(),
                                    time.monotonic() - self.started)
            res = self._done
        if check and res.status != 0:
            reason = "timed out (killed remotely by timeout)" if res.status in (124, 137) \
                else f"exit status {res.status}"
            raise CommandError(res.target, res.command, res.status, res.stderr, reason)
        return res

    def running(self, timeout_s: float = 0.0) -> bool:
        """Pump output for up to ``timeout_s``; True while the command has not finished."""
        with self._lock:
            if self._done is not None:
                return False
            try:
                return not self._pump(time.monotonic() + timeout_s)
            except (TimeoutError, OSError, paramiko.SSHException, EOFError):
                return False

    def _err_text(self) -> str:
        return self._err.decode(errors="replace")

    def output_so_far(self) -> str:
        with self._lock:
            if self._done is None:
                self._pump(time.monotonic())
            return self._out.decode(errors="replace")

    def kill(self) -> None:
        """Stop the remote command (TERM to its timeout/sudo wrapper) and close the channel."""
        if self.pid is None and self._done is None:
            try:
                self._pump(time.monotonic() + 1.0 if self._want_pid else time.monotonic())
            except Exception:  # noqa: BLE001 - best effort, the channel is closed below
                pass
        if self.pid is not None and self._done is None:
            try:
                self.conn.run(f"kill -TERM {int(self.pid)} 2>/dev/null || true", timeout_s=10,
                              sudo=self.sudo)
            except SshError as exc:
                log.warning("%s: could not stop pid %s: %s", self.conn.name, self.pid, exc)
        self.chan.close()


@dataclass
class Outcome(Generic[T]):
    """One target's result of a fan-out: a value or the error it raised, never both."""

    target: str
    value: T | None = None
    error: Exception | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Pool:
    """Connections by target name plus a bounded thread pool for fan-out.

    ``max_connects`` caps concurrent handshakes (sshd ``MaxStartups`` drops bursts); command
    fan-out uses ``workers`` threads.
    """

    endpoints: dict[str, Endpoint]
    max_connects: int = 8
    workers: int = 16
    conns: dict[str, Connection] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.conns = {name: Connection(ep) for name, ep in self.endpoints.items()}
        self._handshakes = threading.Semaphore(max(1, self.max_connects))
        self._executor = ThreadPoolExecutor(max_workers=max(1, self.workers),
                                            thread_name_prefix="ecntune-ssh")

    def __getitem__(self, name: str) -> Connection:
        conn = self.conns[name]
        if not conn.connected:
            with self._handshakes:
                conn.connect()
        return conn

    def connect_all(self, names: Iterable[str] | None = None) -> dict[str, Outcome[None]]:
        return self.fan_out(lambda c: None, names)

    def fan_out(self, fn: Callable[[Connection], T],
                names: Iterable[str] | None = None) -> dict[str, Outcome[T]]:
        """Run ``fn(connection)`` for every named target in parallel; one outcome per target."""
        targets = list(self.conns if names is None else names)

        def one(name: str) -> Outcome[T]:
            t0 = time.monotonic()
            try:
                return Outcome(name, value=fn(self[name]), elapsed_s=time.monotonic() - t0)
            except Exception as exc:  # noqa: BLE001 - one bad target must not sink the pool
                return Outcome(name, error=exc, elapsed_s=time.monotonic() - t0)

        futures = {name: self._executor.submit(one, name) for name in targets}
        return {name: fut.result() for name, fut in futures.items()}

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self._executor.shutdown(wait=True, cancel_futures=True)
