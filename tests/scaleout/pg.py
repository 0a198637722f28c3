"""A PostgreSQL server for the scale-out tests, and a fresh database per test.

``ECNTUNE_TEST_PG`` (set by ``.ci/run``, which starts the machine's cluster) is a superuser URL
to use as is, e.g. ``postgresql://root@/postgres?host=/var/run/postgresql``. Without it a
private cluster is made with Debian's server binaries (``/usr/lib/postgresql/<v>/bin``): initdb
into a fresh folder, a Unix socket there plus a free TCP port on 127.0.0.1 (password auth over
TCP, trust over the socket), run as the ``postgres`` system user when we are root (postgres
refuses to run as root). Tests skip, saying why, only when those binaries are absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from tests.mlflow_server import free_port

ENV = "ECNTUNE_TEST_PG"


def server_bin() -> Path | None:
    """The newest Debian PostgreSQL server bin folder, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    return found[-1].parent if found else None


@dataclass
class PgServer:
    """A running server: ``admin_url`` is a superuser URL (no password, socket or peer)."""

    admin_url: str
    tcp_host: str
    tcp_port: int

    def url(self, db: str, user: str | None = None) -> str:
        u = urlsplit(self.admin_url)
        who = quote(user) if user else (u.username or "")
        return f"postgresql://{who}@{u.hostname or ''}{f':{u.port}' if u.port else ''}/{db}" + (
            f"?{u.query}" if u.query else "")

    def sql(self, statement: str, db: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement as the superuser (autocommit: CREATE DATABASE needs it)."""
        import psycopg

        with psycopg.connect(_conninfo(self.url(db)), autocommit=True) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    @contextmanager
    def database(self) -> Iterator[str]:
        """A fresh, empty database (dropped afterwards); yields its URL."""
        name = f"ecntune_test_{uuid.uuid4().hex[:12]}"
        self.sql(f'CREATE DATABASE "{name}"')
        # A throw-away database need not wait for the WAL flush at each commit (~45 ms on a
        # busy disk, ~90 commits per trial). Never for a real study: a lease row must survive
        # a server crash.
        self.sql(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        try:
            yield self.url(name)
        finally:
            self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _conninfo(url: str) -> str:
    """psycopg takes the URL itself, but not SQLAlchemy's ``+driver`` scheme suffix."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _as_postgres_user() -> dict[str, object]:
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@contextmanager
def private_server(bindir: Path) -> Iterator[PgServer]:
    """initdb + pg_ctl start a throw-away cluster; stopped and removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="ecntune-pg-"))
    data, sock = home / "data", home
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    run = _as_postgres_user()
    port = free_port()
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                    "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True, **run)  # type: ignore[call-overload]
    opts = f"-k {sock} -h 127.0.0.1 -p {port} -c fsync=off -c max_connections=200"
    log = home / "server.log"
    try:
        subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts,
                        "-w", "-t", "60", "start"], check=True, capture_output=True,
                       **run)  # type: ignore[call-overload]
        yield PgServer(admin_url=f"postgresql://postgres@/postgres?host={sock}&port={port}",
                       tcp_host="127.0.0.1", tcp_port=port)
    finally:
        subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                        "stop"], capture_output=True, **run)  # type: ignore[call-overload]
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def server() -> Iterator[PgServer | str]:
    """The server to test against, or (a string) the reason there is none."""
    given = os.environ.get(ENV)
    if given:
        yield PgServer(admin_url=given, tcp_host="127.0.0.1",
                       tcp_port=urlsplit(given).port or int(_query(given).get("port", 5432)))
        return
    bindir = server_bin()
    if bindir is None:
        yield ("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
               "(apt-get install postgresql; .ci/run does)")
        return
    with private_server(bindir) as s:
        yield s


def _query(url: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(urlsplit(url).query))
