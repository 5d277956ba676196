"""The transactional bodies' one lock, taken before a body's first read (see ``runtime/flow/transactional.py``).

SQLite: the transaction begins ``IMMEDIATE`` (the database's one write lock). Postgres: a
transaction-scoped advisory lock on one fixed key, tried (never waited on inside the database, so a
statement timeout never fires on it): the caller polls.
"""

from __future__ import annotations

import zlib

import sqlalchemy as sa

from .names import TRANSACTIONAL_LOCK

_PG_KEY = zlib.crc32(TRANSACTIONAL_LOCK.encode())
_TRY = sa.text("SELECT pg_try_advisory_xact_lock(:k)")


def begin_immediate(conn: sa.Connection) -> None:
    """SQLite: the driver sees the open transaction and adds no BEGIN of its own."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def try_lock(conn: sa.Connection) -> bool:
    """Postgres: take the lock for the rest of this transaction, if free."""
    return bool(conn.execute(_TRY, {"k": _PG_KEY}).scalar())
