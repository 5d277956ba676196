"""Engines for the ledger, one database with DBOS's system tables.

The ledger shares the DBOS system database on purpose: an operator joins ``helix.calls`` with
``dbos.operation_outputs`` in one query, and there is one thing to back up. SQLite has no schemas,
so the ``helix`` schema is translated away there; every SQLite connection takes its write lock up
front (``IMMEDIATE``), because a deferred transaction that reads, then writes, fails at once with
"database is locked" instead of waiting when another writer got in between.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import ConfigurationError
from .tables import SCHEMA


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


def ensure_sqlite_wal(url: str) -> None:
    """Create the SQLite file in WAL mode before DBOS opens it.

    DBOS leaves SQLite in rollback-journal mode, where a writer blocks the notification poller
    across its commit and waiters pay their full timeout; WAL lets readers and the one writer
    proceed together.
    """
    path = sqlite_path(url)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = "IMMEDIATE"
    dbapi_conn.execute("PRAGMA busy_timeout=30000")
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def translate_map(url: str) -> dict[str | None, str | None]:
    return {SCHEMA: None} if is_sqlite(url) else {SCHEMA: SCHEMA}


def create_sync_engine(url: str, **kwargs: Any) -> sa.Engine:
    """A blocking engine for the entry gate, answers and reads (callers' threads, not the DBOS loop)."""
    if is_sqlite(url):
        engine = sa.create_engine(sync_url(url), connect_args={"check_same_thread": False}, **kwargs)
        event.listens_for(engine, "connect")(_sqlite_pragmas)
    else:
        if "poolclass" not in kwargs:
            kwargs.setdefault("pool_size", 10)
            kwargs.setdefault("max_overflow", 10)
            kwargs.setdefault("pool_pre_ping", True)
        engine = sa.create_engine(sync_url(url), **kwargs)
    return engine.execution_options(schema_translate_map=translate_map(url))
