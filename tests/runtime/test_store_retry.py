"""Which store errors ``store_retry`` rides out, and which it lets through at once.

A transient error (the store went away, or told the client to try again) is retried inside
``store_retry_window``; anything else is a real answer: a cancelled query (``statement_timeout``,
an operator's ``pg_cancel_backend``) or a broken constraint would fail the same way again, and
retrying it would only hide the bug for a minute. The errors are real objects: psycopg's and
sqlite3's exception classes, wrapped by SQLAlchemy's own ``DBAPIError.instance`` as an engine
wraps them, and, further down, errors the two databases really raise.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psycopg
import psycopg.errors as pe
import pytest
import sqlalchemy as sa

from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.runtime.floor import store_retry
from helix_dbos.runtime.floor.store_retry import is_transient


def wrapped(orig: Exception, *, invalidated: bool = False) -> sa.exc.DBAPIError:
    """``orig`` as a SQLAlchemy engine hands it to the runtime (the subclass matches the DBAPI class)."""
    base = sqlite3.Error if isinstance(orig, sqlite3.Error) else psycopg.Error
    err = sa.exc.DBAPIError.instance("UPDATE helix.calls SET status = 'ok'", {}, orig, base, connection_invalidated=invalidated)
    assert isinstance(err, sa.exc.DBAPIError) and err.orig is orig
    return err


TRANSIENT = {
    "serialization failure (40001)": lambda: wrapped(pe.SerializationFailure("could not serialize access due to concurrent update")),
    "deadlock (40P01)": lambda: wrapped(pe.DeadlockDetected("deadlock detected")),
    "admin shutdown (57P01)": lambda: wrapped(pe.AdminShutdown("terminating connection due to administrator command")),
    "crash shutdown (57P02)": lambda: wrapped(pe.CrashShutdown("terminating connection because of crash of another server process")),
    "cannot connect now (57P03)": lambda: wrapped(pe.CannotConnectNow("the database system is starting up")),
    "too many connections (53300)": lambda: wrapped(pe.TooManyConnections("sorry, too many clients already")),
    "connection failure (08006)": lambda: wrapped(pe.ConnectionFailure("connection failure")),
    "idle session timeout (25P03)": lambda: wrapped(pe.IdleInTransactionSessionTimeout("terminating connection due to idle-in-transaction timeout")),
    "connection refused (no SQLSTATE)": lambda: wrapped(psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused')),
    "connection dropped (no SQLSTATE)": lambda: wrapped(psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")),
    "disconnect SQLAlchemy saw": lambda: wrapped(psycopg.InterfaceError("the connection is closed"), invalidated=True),
    "pool checkout timed out": lambda: sa.exc.TimeoutError("QueuePool limit of size 20 overflow 20 reached, connection timed out, timeout 30.00"),
    "SQLite busy": lambda: wrapped(sqlite3.OperationalError("database is locked")),
    "SQLite table locked": lambda: wrapped(sqlite3.OperationalError("database table is locked")),
}

PERMANENT = {
    "query cancel (57014)": lambda: wrapped(pe.QueryCanceled("canceling statement due to statement timeout")),
    "unique violation (23505)": lambda: wrapped(pe.UniqueViolation('duplicate key value violates unique constraint "sessions_pkey"')),
    "foreign key violation (23503)": lambda: wrapped(pe.ForeignKeyViolation("insert or update on table violates foreign key constraint")),
    "not null violation (23502)": lambda: wrapped(pe.NotNullViolation('null value in column "run_id" violates not-null constraint')),
    "check violation (23514)": lambda: wrapped(pe.CheckViolation("new row violates check constraint")),
    "character not representable (22P05)": lambda: wrapped(pe.UntranslatableCharacter("unsupported Unicode escape sequence")),
    "undefined table (42P01)": lambda: wrapped(pe.UndefinedTable('relation "helix.nope" does not exist')),
    "SQLite constraint": lambda: wrapped(sqlite3.IntegrityError("UNIQUE constraint failed: sessions.session_id")),
    "SQLite other operational": lambda: wrapped(sqlite3.OperationalError("no such table: nope")),
    "not a store error": lambda: ValueError("a body's own bug"),
}


@pytest.mark.parametrize("make", TRANSIENT.values(), ids=TRANSIENT.keys())
def test_transient_store_errors_are_retried(make: object) -> None:
    assert is_transient(make())  # type: ignore[operator]


@pytest.mark.parametrize("make", PERMANENT.values(), ids=PERMANENT.keys())
def test_a_cancel_or_a_broken_constraint_is_not_retried(make: object) -> None:
    assert not is_transient(make())  # type: ignore[operator]


def test_retrying_runs_a_transient_failure_again_and_lets_a_permanent_one_through() -> None:
    """The classification is what the retry loop acts on: a deadlock is re-run, a unique violation is not."""
    tries: list[str] = []

    def deadlocked_once() -> str:
        tries.append("deadlock")
        if len(tries) == 1:
            raise TRANSIENT["deadlock (40P01)"]()
        return "committed"

    assert store_retry.retrying_sync("writing", deadlocked_once, window=5) == "committed" and len(tries) == 2

    def duplicate() -> str:
        tries.append("duplicate")
        raise PERMANENT["unique violation (23505)"]()

    with pytest.raises(sa.exc.IntegrityError):
        store_retry.retrying_sync("writing", duplicate, window=5)
    assert tries.count("duplicate") == 1


# --- the errors the databases really raise ------------------------------------------------------


def _raised(conn: sa.Connection, sql: str) -> sa.exc.DBAPIError:
    with pytest.raises(sa.exc.DBAPIError) as info:
        conn.execute(sa.text(sql))
    return info.value


def test_real_postgres_errors_are_classified(pg_url: str) -> None:
    engine = create_sync_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE TEMP TABLE once (k int PRIMARY KEY)"))
            conn.execute(sa.text("INSERT INTO once VALUES (1)"))
            duplicate = _raised(conn, "INSERT INTO once VALUES (1)")
            assert isinstance(duplicate.orig, pe.UniqueViolation) and not is_transient(duplicate)
            conn.rollback()
            conn.execute(sa.text("SET statement_timeout = 50"))
            cancelled = _raised(conn, "SELECT pg_sleep(5)")
            assert isinstance(cancelled.orig, pe.QueryCanceled) and not is_transient(cancelled)
        with engine.connect() as conn:  # the server ends the session, as a restart or an operator does
            shutdown = _raised(conn, "SELECT pg_terminate_backend(pg_backend_pid())")
            assert isinstance(shutdown.orig, pe.AdminShutdown) and is_transient(shutdown)

        # a serialization failure: two repeatable-read transactions update one row
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE IF NOT EXISTS helix_retry_probe (k int PRIMARY KEY, v int)"))
            conn.execute(sa.text("INSERT INTO helix_retry_probe VALUES (1, 0) ON CONFLICT DO NOTHING"))
        rr = engine.execution_options(isolation_level="REPEATABLE READ")
        with rr.connect() as first, rr.connect() as second:
            first.execute(sa.text("SELECT v FROM helix_retry_probe WHERE k = 1"))
            second.execute(sa.text("SELECT v FROM helix_retry_probe WHERE k = 1"))
            first.execute(sa.text("UPDATE helix_retry_probe SET v = v + 1 WHERE k = 1"))
            failed: list[sa.exc.DBAPIError] = []

            def update() -> None:
                try:
                    second.execute(sa.text("UPDATE helix_retry_probe SET v = v + 1 WHERE k = 1"))
                except sa.exc.DBAPIError as exc:
                    failed.append(exc)

            waiter = threading.Thread(target=update)
            waiter.start()  # blocks on the row until the first commits, then fails
            first.commit()
            waiter.join(10)
            (serialization,) = failed
            assert isinstance(serialization.orig, pe.SerializationFailure) and is_transient(serialization)
        refused = create_sync_engine(sa.engine.make_url(pg_url).set(port=1).render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
        with pytest.raises(sa.exc.OperationalError) as info:
            refused.connect()
        assert is_transient(info.value)  # nothing listens: connection refused
        refused.dispose()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS helix_retry_probe"))
        engine.dispose()


def test_real_sqlite_errors_are_classified(tmp_path: Path) -> None:
    path = tmp_path / "busy.sqlite"
    engine = create_sync_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
    sa.event.listen(engine, "connect", lambda dbapi, _rec: dbapi.execute("PRAGMA busy_timeout=0"))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE once (k int PRIMARY KEY)"))
            conn.execute(sa.text("INSERT INTO once VALUES (1)"))
        with engine.connect() as conn:
            duplicate = _raised(conn, "INSERT INTO once VALUES (1)")
            assert isinstance(duplicate, sa.exc.IntegrityError) and not is_transient(duplicate)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the file's write lock
        try:
            with pytest.raises(sa.exc.OperationalError) as info:
                with engine.begin() as conn:  # BEGIN IMMEDIATE too (ledger/engine.py): busy at once
                    conn.execute(sa.text("INSERT INTO once VALUES (2)"))
            assert "database is locked" in str(info.value) and is_transient(info.value)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        engine.dispose()


def test_a_silent_server_is_a_transient_error_within_the_bound(pg_url: str) -> None:
    """A server that stops answering raises nothing by itself (the proxy holds the bytes, the kernel
    acknowledges them): inside ``bounded_waits`` the waiting query, and a new connection's attempt,
    fail transient by the bound, the pool discards the connection, and the next query after the
    silence works; outside it the same query simply waits the silence out."""
    import time

    from helix_dbos.ledger.engine import WaitBound, bounded_waits
    from tests.support.tcpproxy import TcpProxy

    proxy = TcpProxy.for_url(pg_url)
    engine = create_sync_engine(proxy.url(pg_url), pool_size=2, max_overflow=0)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1  # pooled, then stalled below
        proxy.stall()
        # the pooled connection's pre-ping waits past the bound, then so does the reconnect SQLAlchemy tries
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError) as info, bounded_waits(WaitBound(1.0)):
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        assert is_transient(info.value) and time.monotonic() - started < 4, info.value  # libpq's connect minimum: 2 s
        threading.Timer(1.5, proxy.restore).start()
        started = time.monotonic()
        with engine.connect() as conn:  # no bound: it waits for the server, then goes on
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        assert time.monotonic() - started >= 1.4
    finally:
        proxy.restore()
        engine.dispose()
        proxy.close()
