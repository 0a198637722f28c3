"""Slice leases: which worker holds which canary slice, in the study's own database.

One row per (study, slice) in ``ecntune_slice_leases``, next to Optuna's tables: the holder
(``host:pid:random``), a random token and an expiry. Every time is the database's clock, so
workers on machines with skewed clocks agree on who has expired.

* ``acquire`` is one atomic upsert: it inserts the row, or takes it over only when it has
  expired (or is already this holder's). Two workers can therefore never hold one slice: the
  database serialises the two statements on the row and the loser's ``WHERE`` fails. The
  expiry counts from the start of the upsert, which may have waited on a concurrent release:
  a lease can be shorter than ``ttl_s`` by that wait, never longer (safe: renewals fail once
  it has passed).
* ``renew`` pushes the expiry on, only while the token is ours and the lease has not expired;
  ``None`` means the slice may already be someone else's: stop touching it.
* ``release`` deletes the row (only with our token).
* A worker that died stops renewing; after ``ttl_s`` its slice can be stolen, and the thief is
  told whom it took it from (``Lease.taken_from``) so it restores the slice first.

``LeaseKeeper`` renews from a thread every ``ttl_s / 3`` and runs a per-tick callback (the
Optuna trial heartbeat rides on it).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tuner import storage_url
from tuner.errors import ConfigError

TABLE = "ecntune_slice_leases"

_DDL = (f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        "study VARCHAR(512) NOT NULL, slice VARCHAR(128) NOT NULL, "
        "holder VARCHAR(256) NOT NULL, token VARCHAR(64) NOT NULL, "
        "acquired_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL, "
        "previous VARCHAR(256), PRIMARY KEY (study, slice))")

# The database's clock in epoch seconds (clock_timestamp, not now(): now() is frozen at the
# start of the transaction).
_NOW = {"postgresql": "EXTRACT(EPOCH FROM clock_timestamp())",
        "sqlite": "((julianday('now') - 2440587.5) * 86400.0)"}


def holder_id() -> str:
    """This process as a lease holder: ``host:pid:random`` (unique even after a pid reuse)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Lease:
    study: str
    slice: str
    holder: str
    token: str
    expires_at: float
    taken_from: str | None = None  # the expired holder this lease was stolen from


@dataclass(frozen=True)
class LeaseRow:
    slice: str
    holder: str
    expires_at: float
    live: bool


class SliceLeases:
    """Slice leases of one study in the database at ``url`` (the study's storage URL)."""

    def __init__(self, url: str, study: str, *, ttl_s: float = 30.0,
                 holder: str | None = None) -> None:
        if ttl_s <= 0:
            raise ConfigError(f"lease ttl_s: value {ttl_s} -- must be positive")
        self.study = study
        self.ttl_s = float(ttl_s)
        self.holder = holder or holder_id()
        sa_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if url.startswith("sqlite"):
            kwargs = {"connect_args": {"timeout": 30}}
        self.engine = sa.create_engine(sa_url, **kwargs)
        dialect = self.engine.dialect.name
        if dialect not in _NOW:
            raise ConfigError(f"storage {storage_url.hide(url)}: slice leases need "
                              "PostgreSQL or SQLite")
        self._now = _NOW[dialect]
        self._create_table()

    def _create_table(self) -> None:
        with self.engine.begin() as c:
            if self.engine.dialect.name == "postgresql":
                # CREATE TABLE IF NOT EXISTS is not safe against a concurrent twin in PostgreSQL.
                c.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": TABLE})
            c.execute(sa.text(_DDL))

    def acquire(self, slice_name: str) -> Lease | None:
        """The slice's lease, or ``None`` while another holder's lease is live."""
        token = secrets.token_hex(16)
        p = {"study": self.study, "slice": slice_name, "holder": self.holder, "token": token,
             "ttl": self.ttl_s}
        with self.engine.begin() as c:  # the upsert first: SQLite takes its write lock here
            got = c.execute(sa.text(
                f"INSERT INTO {TABLE} (study, slice, holder, token, acquired_at, expires_at, "
                f"previous) VALUES (:study, :slice, :holder, :token, {self._now}, "
                f"{self._now} + :ttl, NULL) ON CONFLICT (study, slice) DO UPDATE SET "
                "previous = " + TABLE + ".holder, holder = excluded.holder, "
                "token = excluded.token, acquired_at = excluded.acquired_at, "
                f"expires_at = excluded.expires_at WHERE {TABLE}.expires_at < {self._now} "
                f"OR {TABLE}.holder = excluded.holder"), p)
            if got.rowcount != 1:
                return None
            expires, previous = c.execute(sa.text(
                f"SELECT expires_at, previous FROM {TABLE} WHERE study = :study "
                "AND slice = :slice AND token = :token"), p).one()
        taken = str(previous) if previous is not None and previous != self.holder else None
        return Lease(self.study, slice_name, self.holder, token, float(expires), taken)

    def renew(self, lease: Lease) -> float | None:
        """Push the expiry on; the new expiry, or ``None`` if the lease expired or was taken
        (then stop touching the slice at once)."""
        with self.engine.begin() as c:
            got = c.execute(sa.text(
                f"UPDATE {TABLE} SET expires_at = {self._now} + :ttl WHERE study = :study "
                f"AND slice = :slice AND token = :token AND expires_at >= {self._now} "
                "RETURNING expires_at"),
                {"ttl": self.ttl_s, "study": lease.study, "slice": lease.slice,
                 "token": lease.token}).first()
            return float(got[0]) if got is not None else None

    def now(self) -> float:
        """The database's clock (epoch seconds), the one every expiry is measured on."""
        with self.engine.connect() as c:
            return float(c.execute(sa.text(f"SELECT {self._now}")).scalar_one())

    def release(self, lease: Lease) -> None:
        with self.engine.begin() as c:
            c.execute(sa.text(f"DELETE FROM {TABLE} WHERE study = :study AND slice = :slice "
                              "AND token = :token"),
                      {"study": lease.study, "slice": lease.slice, "token": lease.token})

    def rows(self) -> list[LeaseRow]:
        """Every lease of the study, live or expired (for ``ecntune worker --status``)."""
        with self.engine.connect() as c:
            got = c.execute(sa.text(
                f"SELECT slice, holder, expires_at, expires_at >= {self._now} FROM {TABLE} "
                "WHERE study = :study ORDER BY slice"), {"study": self.study}).all()
        return [LeaseRow(str(r[0]), str(r[1]), float(r[2]), bool(r[3])) for r in got]

    @contextmanager
    def mutex(self, name: str, wait_s: float = 120.0) -> Iterator[None]:
        """Hold the pseudo-slice ``name`` as a lock (one-time set-up among workers)."""
        deadline = time.monotonic() + wait_s
        while (lease := self.acquire(name)) is None:
            if time.monotonic() > deadline:
                raise ConfigError(f"study {self.study}: {name} held by another worker for "
                                  f"over {wait_s:.0f} s")
            time.sleep(0.1)
        try:
            with LeaseKeeper(self, lease):  # a slow set-up must not lose the lock
                yield
        finally:
            self.release(lease)

    def close(self) -> None:
        self.engine.dispose()


class LeaseKeeper:
    """Renews a lease from a daemon thread every ``ttl_s / 3``; ``lost`` is set the first time a
    renewal fails (or raises) and renewing stops. ``on_tick`` runs after each good renewal."""

    def __init__(self, leases: SliceLeases, lease: Lease,
                 on_tick: Callable[[], None] | None = None) -> None:
        self.leases = leases
        self.lease = lease
        self.on_tick = on_tick
        self.lost = threading.Event()
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.slice}",
                                        daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.leases.ttl_s / 3):
            try:
                ok = self.leases.renew(self.lease) is not None
            except Exception as exc:  # database unreachable: the lease will expire
                ok, self.error = False, f"{type(exc).__name__}: {exc}".splitlines()[0]
            if not ok:
                self.error = self.error or "lease expired or taken by another worker"
                self.lost.set()
                return
            if self.on_tick is not None:
                try:
                    self.on_tick()
                except Exception as exc:  # a missed heartbeat is retried on the next tick
                    self.error = f"tick: {type(exc).__name__}: {exc}".splitlines()[0]
