"""Engines for the ledger, one database with DBOS's system tables.

The ledger shares the DBOS system database on purpose: an operator joins ``helix.calls`` with
``dbos.operation_outputs`` in one query, and there is one thing to back up. SQLite has no schemas,
so the ``helix`` schema is translated away there. A SQLite write transaction takes the write lock
(``IMMEDIATE``), because a deferred transaction that reads, then writes, fails at once with
"database is locked" instead of waiting when another writer got in between; pysqlite takes it at
the first write, and a ``FOR UPDATE`` read (the ledger's mark of a read that decides a write) takes
it before reading (``_sqlite_lock_for_update``), as Postgres locks the rows.
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import ConfigurationError
from . import sqlite_turns
from .tables import SCHEMA

if TYPE_CHECKING:
    import psycopg


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def check_url(url: str) -> URL:
    """The parsed URL, or a ``configuration_error`` for one that is not a Postgres or SQLite URL.

    Anything else used to fall through to SQLite's driver, so ``mysql://...`` quietly became a file.
    """
    try:
        u = make_url(url)
    except ArgumentError:
        raise ConfigurationError(f"{url!r} is not a database URL; use postgresql://user@host:5432/dbname or sqlite:///path/to/file.sqlite") from None
    if u.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(f"helix-dbos runs on PostgreSQL or SQLite, not {u.get_backend_name()!r} ({u.render_as_string(hide_password=True)})")
    return u


def sync_url(url: str) -> str:
    """The URL for a blocking engine: psycopg 3 on Postgres, the stdlib driver on SQLite."""
    u = check_url(url)
    if u.get_backend_name() == "postgresql":
        return str(u.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    return str(u.set(drivername="sqlite").render_as_string(hide_password=False))


def sqlite_path(url: str) -> Path | None:
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def check_sqlite_folder(url: str) -> None:
    """Refuse a SQLite URL whose folder is missing (``configuration_error`` naming it).

    The file is created on first use, its folder never: a mistyped path must not turn into a new
    directory tree holding an empty ledger, and "run helix-dbos migrate" is no help when the
    migration could not create the file either.
    """
    path = sqlite_path(url)
    if path is None:
        return
    folder = path.parent
    if not folder.is_dir():
        shown = folder.absolute()
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigurationError(
            f"the SQLite database's folder {shown} {problem}; create it (mkdir -p {shown}) or fix the path in the database URL",
            detail={"database_url": url, "folder": str(shown)},
        )


def ensure_sqlite_wal(url: str) -> None:
    """Create the SQLite file in WAL mode before DBOS opens it (its folder must exist).

    DBOS leaves SQLite in rollback-journal mode, where a writer blocks the notification poller
    across its commit and waiters pay their full timeout; WAL lets readers and the one writer
    proceed together.
    """
    path = sqlite_path(url)
    if path is None:
        return
    check_sqlite_folder(url)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = "IMMEDIATE"
    dbapi_conn.execute("PRAGMA busy_timeout=30000")
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def _sqlite_lock_for_update(conn: sa.Connection, clauseelement: Any, _multiparams: Any, _params: Any, _options: Any) -> None:
    """A ``FOR UPDATE`` read on SQLite takes the database's write lock before it reads.

    Why: pysqlite's ``isolation_level = "IMMEDIATE"`` begins the transaction only at the first
    INSERT/UPDATE/DELETE, so every read before it ran outside the transaction, in autocommit: a
    stop read the session as live, the worker's completion committed, then the stop's write began
    and recorded a stop of an ended run. SQLite renders no ``FOR UPDATE``; this hook gives the
    clause the meaning it has on Postgres (the rows read stay as read until the commit), the way
    every read-decide-write transaction of the ledger already marks its deciding reads. A plain
    read still takes no lock, so readers never queue behind a transactional body's write lock.
    """
    if getattr(clauseelement, "_for_update_arg", None) is None:
        return
    dbapi_conn = conn.connection.dbapi_connection
    if dbapi_conn is not None and not dbapi_conn.in_transaction:
        # Through SQLAlchemy, not the driver: a busy database is then its OperationalError, which
        # the store's retry knows as transient (a raw sqlite3 error escaped it and failed the run).
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def translate_map(url: str) -> dict[str | None, str | None]:
    return {SCHEMA: None} if is_sqlite(url) else {SCHEMA: SCHEMA}


def _with_schema(engine: sa.Engine, url: str) -> sa.Engine:
    """The engine with the ledger's schema mapped for ``url``'s database, only where it changes a name.

    Why not always: an engine with a ``schema_translate_map`` re-renders every statement's text at
    every execution (SQLAlchemy substitutes the schema placeholders with a regex), ~20 per statement
    of a run. On Postgres the map is the identity (the tables are declared in ``helix``), so the
    statements are the same text without it; SQLite (no schemas) still needs ``helix`` mapped away.
    """
    mapping = translate_map(url)
    if all(k == v for k, v in mapping.items()):
        return engine
    return engine.execution_options(schema_translate_map=mapping)


#: libpq's connection options on every Postgres connection of the ledger. A connection attempt
#: gives up after ``connect_timeout`` seconds (libpq waits for ever by default, so a server that
#: accepts and never answers hung the runtime); keepalives and ``tcp_user_timeout`` (ms) drop a
#: connection whose peer vanished (a host gone, a partition), which otherwise waits for an answer
#: for ever. A server that is alive but does not answer is bounded by ``bounded_waits``.
PG_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}

class WaitBound:
    """How long the current try of a retried transaction may wait on the server.

    ``span``: seconds counted from the moment the try holds a pooled connection (a wait for one of
    the pool's connections is no silence of the server: with more runs in flight than connections it
    is the normal state, and counting it turned a busy worker's runs into ``store_unavailable``);
    ``cap``: a monotonic time no wait goes past whatever the checkout (the retry window's end once
    an outage began), or None. ``until``: the current bound, restarted at each checkout;
    ``started``: when it was last restarted (where a failure's retry window opens)."""

    __slots__ = ("cap", "span", "started", "until")

    def __init__(self, span: float, cap: float | None = None) -> None:
        self.span, self.cap = span, cap
        self.started = self.until = 0.0
        self.restart()

    def restart(self) -> None:
        self.started = time.monotonic()
        until = self.started + self.span
        self.until = until if self.cap is None else min(until, self.cap)


#: The bound of the current retried transaction's waits on the server (None: no bound). Set by
#: ``store_retry`` for each try of a transaction with a finite window.
_wait_until: ContextVar[WaitBound | None] = ContextVar("helix_wait_until", default=None)


@contextmanager
def bounded_waits(bound: WaitBound | None) -> Iterator[None]:
    """Within this block (and the worker threads it starts, which copy the context), a Postgres
    connection of the ledger that waits for the server past ``bound.until`` is closed and the wait
    fails with a psycopg ``OperationalError`` (no SQLSTATE: a lost connection, transient). Each
    checkout from the pool restarts the bound (``WaitBound``), so the wait for a pooled connection
    does not eat the server's time.

    Why: a server that stops answering without closing anything (frozen, overloaded, a proxy or
    link that holds the bytes) leaves a client blocked in a read for ever; the kernel acknowledges
    what was sent, so neither keepalives nor ``tcp_user_timeout`` notice. Any wait on the server
    counts, a lock wait included: a transaction that cannot get an answer within the window is, to
    its caller, a store that is unavailable.
    """
    if bound is None or math.isinf(bound.until):
        yield
        return
    token = _wait_until.set(bound)
    try:
        yield
    finally:
        _wait_until.reset(token)


class BoundedQueuePool(sa.pool.QueuePool):
    """The ledger's Postgres pool: a checkout restarts the current try's ``WaitBound`` once it holds
    a connection (before the pre-ping, which is a wait on the server like any other)."""

    def _do_get(self) -> Any:
        record = super()._do_get()
        bound = _wait_until.get()
        if bound is not None:
            bound.restart()
        return record


@contextmanager
def unbounded_waits() -> Iterator[None]:
    """Within this block the ledger's Postgres waits are not bounded by an enclosing ``bounded_waits``.

    Why: a transactional body's own statements (a long query, a wait for a row lock its own
    application holds) are the tool's work, not the store's silence; bounding them by
    ``store_retry_window`` turned a long body into a ``store_unavailable`` run. Keepalives and
    ``tcp_user_timeout`` still drop a connection whose peer vanished."""
    token = _wait_until.set(None)
    try:
        yield
    finally:
        _wait_until.reset(token)


@functools.cache
def _bounded_connection_class() -> type[psycopg.Connection[Any]]:
    """A psycopg ``Connection`` whose waits honour ``bounded_waits`` (built on first use: importing
    psycopg is not free, and SQLite users never need it)."""
    import psycopg
    from psycopg import errors as pe

    class BoundedConnection(psycopg.Connection[Any]):
        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            bound = _wait_until.get()
            if bound is None:
                return super().wait(gen, interval, timeout)
            left = max(bound.until - time.monotonic(), 0.0)
            try:
                return super().wait(gen, interval, left if timeout is None else min(timeout, left))
            except pe._WaitTimeout:
                if timeout is not None and timeout <= left:
                    raise  # the caller's own timeout, not ours
                # Half-way through the protocol: the connection cannot be used again. Closed, it is
                # a disconnect to SQLAlchemy (invalidated, the pool recycled) and transient to us.
                self.pgconn.finish()
                raise psycopg.OperationalError("the database did not answer in time (store_retry_window); connection closed") from None

    return BoundedConnection


def _bounded_connect(dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
    bound = _wait_until.get()
    if bound is not None:  # a connection attempt inside the bound gives up with it (libpq's minimum: 2 s)
        cparams["connect_timeout"] = max(2, min(int(cparams.get("connect_timeout") or 10), math.ceil(bound.until - time.monotonic())))
    return _bounded_connection_class().connect(*cargs, **cparams)


#: What every connection of a pool made with ``generic_plans`` runs once, when it opens.
GENERIC_PLANS_SQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', false)"


#: How many prepared statements a ``generic_plans`` connection keeps (psycopg's default is 100): every
#: statement the runtime runs on one connection, with room to spare, so none is evicted and prepared
#: again (each eviction is a ``DEALLOCATE`` round trip and a parse and a plan at its next use).
PREPARED_MAX = 400


def _generic_plans(dbapi_conn: Any, _record: Any) -> None:
    """The connection prepares each statement at its first execution and keeps one generic plan for
    it (``create_sync_engine``'s ``generic_plans``); committed, so the pool's first checkout finds no
    transaction open."""
    dbapi_conn.prepare_threshold = 0
    dbapi_conn.prepared_max = PREPARED_MAX
    with dbapi_conn.cursor() as cur:
        cur.execute(GENERIC_PLANS_SQL)
    dbapi_conn.commit()


def create_sync_engine(url: str, *, application_name: str | None = None, generic_plans: bool = False, **kwargs: Any) -> sa.Engine:
    """A blocking engine for the entry gate, answers and reads (callers' threads, not the DBOS loop).

    On Postgres its pool keeps ``pool_size`` connections (default 10) and opens none beyond them
    (``max_overflow`` 0 unless the caller says otherwise): overflow connections were opened and
    closed as load came and went, thousands over a busy hour (runtime/process/pools.py). Its
    connections say ``application_name`` in ``pg_stat_activity`` (ignored on SQLite).

    ``generic_plans`` (Postgres, a connection straight to the server): each connection prepares a
    statement the first time it runs it and sets ``plan_cache_mode = force_generic_plan`` for its
    session. psycopg's default prepares a statement once a connection has run it five times, so each
    of a pool's connections parsed and planned each statement five times before it kept it: at 1,000
    runs on one worker that warm-up was 4.7 plans a run and 1.2 ms of planning (docs/benchmarks.md),
    besides the parses. Postgres then still plans each execution anew whenever its cost
    model guesses that a plan for these values beats the cached generic one, and for the ledger's
    keyed statements that guess flipped back and forth under a growing ledger: at 1,000 runs in
    flight the step's fenced reads were planned again at 2 of every 5 executions, about 2.6 ms of
    Postgres CPU a run (docs/benchmarks.md). Every statement of the ledger finds its rows by a key,
    so the generic plan is the plan. Not through a transaction-mode pooler: its connections prepare
    nothing (``POOLER_CONNECT_ARGS``), and a setting of one server session would not follow the
    client to the next."""
    if is_sqlite(url):
        engine = sa.create_engine(sync_url(url), connect_args={"check_same_thread": False}, **kwargs)
        event.listens_for(engine, "connect")(_sqlite_pragmas)
        event.listen(engine, "before_execute", _sqlite_lock_for_update)
        path = sqlite_path(url)
        if path is not None:  # a file (an in-memory database has one connection, no one to wait for)
            sqlite_turns.install(engine, path)
    else:
        if "poolclass" not in kwargs:
            kwargs["poolclass"] = BoundedQueuePool
            kwargs.setdefault("pool_size", 10)
            kwargs.setdefault("max_overflow", 0)
            kwargs.setdefault("pool_pre_ping", True)
        named = {"application_name": application_name} if application_name else {}
        kwargs["connect_args"] = {**PG_CONNECT_ARGS, **named, **kwargs.get("connect_args", {})}
        engine = sa.create_engine(sync_url(url), **kwargs)
        event.listen(engine, "do_connect", _bounded_connect)
        if generic_plans:
            event.listen(engine, "connect", _generic_plans)
    return _with_schema(engine, url)


def ping(engine: sa.Engine) -> None:
    """One round trip to the database (raises the driver's error when it does not answer)."""
    with engine.connect() as conn:
        conn.execute(sa.select(sa.literal(1)))


def explain_database_error(exc: BaseException) -> ConfigurationError | None:
    """A driver's connection failure as a ``configuration_error`` whose hint fits the cause."""
    text = str(getattr(exc, "orig", None) or exc)
    missing = re.search(r'database "([^"]+)" does not exist', text)
    if missing:
        return ConfigurationError(
            f"the database {missing.group(1)!r} does not exist on that server; create it first (createdb {missing.group(1)}, or CREATE DATABASE), then run `helix-dbos migrate`",
            detail=text.strip().splitlines()[0],
        )
    if re.search(r"Connection refused|could not translate host name|Name or service not known|timeout expired|No route to host|could not connect", text, re.I):
        return ConfigurationError("cannot reach the database server: is it running, and is the host and port in the database URL (--db, HELIX_DBOS_DATABASE_URL or database_url=) right?", detail=text.strip().splitlines()[0])
    if re.search(r'password authentication failed|no pg_hba.conf entry|role "[^"]+" does not exist', text):
        return ConfigurationError("the database server refused the login; check the user and password in --db", detail=text.strip().splitlines()[0])
    if "unable to open database file" in text:
        return ConfigurationError("cannot open the SQLite file: does its directory exist and is it writable?", detail=text.strip())
    return None


def without_sql(exc: BaseException) -> str | None:
    """A failed statement's error as the driver gave it, without the SQL text and parameters that
    SQLAlchemy appends (None: not a statement's error). A run's error and a model's answer say what
    went wrong, never the statement the runtime (or a tool's body) sent."""
    if not isinstance(exc, sa.exc.StatementError):
        return None
    orig = exc.orig if exc.orig is not None else exc
    lines = [line for line in str(orig).strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(orig).__name__
    if orig is exc:
        first = first.split("[SQL:", 1)[0].strip() or type(exc).__name__
    return f"{type(orig).__name__}: {first}"

