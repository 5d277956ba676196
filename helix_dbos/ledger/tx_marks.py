"""A transactional body's marker: the row its own transaction writes first (``tables.tx_marks``).

The attempt row is committed apart, before the body, so it proves nothing about the body's effect.
The marker is written inside the body's transaction before the body runs and deleted by the result
write in that same transaction, so once that transaction ends it is committed only if the body
committed the transaction itself (through the driver's connection, past ``ctx.connection``): then
the body's effect may exist and the call has no result. Recovery reads it beside each call
(``escaped_column``) and never runs such a call again; the live path looks for it from outside the
transaction before it writes the result (``committed``).
"""

from __future__ import annotations

import functools

import sqlalchemy as sa

from . import tables as t
from .rows import now


def mark(conn: sa.Connection, dispatch_id: str, attempt: int) -> None:
    """Inside the body's transaction, before the body runs."""
    conn.execute(_INSERT, {"dispatch_id": dispatch_id, "attempt": attempt, "marked_at": now()})


def unmark(conn: sa.Connection, dispatch_id: str, attempt: int) -> None:
    """Inside the body's transaction, with its result: a transaction that commits whole leaves no marker."""
    conn.execute(_DELETE, {"w_dispatch_id": dispatch_id, "w_attempt": attempt})


def committed(conn: sa.Connection, dispatch_id: str, attempt: int | None = None) -> bool:
    """Whether a marker of the call (of one attempt) is committed: read from a connection outside the
    body's transaction, True means the body committed that transaction itself."""
    stmt = sa.select(sa.literal(1)).select_from(t.tx_marks).where(t.tx_marks.c.dispatch_id == dispatch_id)
    if attempt is not None:
        stmt = stmt.where(t.tx_marks.c.attempt == attempt)
    return conn.execute(stmt.limit(1)).first() is not None


@functools.cache
def escaped_column() -> sa.Label[bool]:
    """``tx_escaped`` beside a ``calls`` row: some body of the call committed its transaction itself."""
    return sa.exists(sa.select(sa.literal(1)).select_from(t.tx_marks).where(t.tx_marks.c.dispatch_id == t.calls.c.dispatch_id)).label("tx_escaped")


_INSERT = t.tx_marks.insert()
_DELETE = t.tx_marks.delete().where(t.tx_marks.c.dispatch_id == sa.bindparam("w_dispatch_id"), t.tx_marks.c.attempt == sa.bindparam("w_attempt"))
