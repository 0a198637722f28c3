"""The PostgreSQL fixture gives each test its own empty database on a live server."""

from __future__ import annotations

from tests.scaleout.pg import PgServer


def test_fresh_database_is_empty_and_private(pg_server: PgServer, pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables "
                              "WHERE table_schema = 'public'").fetchone()
        conn.execute("CREATE TABLE mine (x int)")
    assert tables == (0,)
    with pg_server.database() as other, psycopg.connect(other) as conn:
        row = conn.execute("SELECT to_regclass('public.mine')").fetchone()
    assert row == (None,)
