"""The ``messages`` table: a session's conversation, one pydantic-ai message (JSON) a row.

Stored once per session and numbered in order; a rewind marks messages ``superseded_by``
(``checkpoints.rewind_to``), never deletes them.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import MessageRow
from .rows import fetch_all, now


def active_messages(conn: sa.Connection, session_id: str) -> list[MessageRow]:
    return cast("list[MessageRow]", fetch_all(
        conn,
        sa.select(t.messages.c.seq, t.messages.c.kind, t.messages.c.body, t.messages.c.run_id, t.messages.c.step)
        .where(t.messages.c.session_id == session_id, t.messages.c.superseded_by.is_(None))
        .order_by(t.messages.c.seq),
    ))


def next_message_seq() -> Any:
    """The session's (``w_session_id``) next message number, computed inside the statement that uses it."""
    top = sa.select(sa.func.coalesce(sa.func.max(t.messages.c.seq) + 1, 0)).where(t.messages.c.session_id == sa.bindparam("w_session_id"))
    return top.scalar_subquery()


_INSERT_MESSAGE = t.messages.insert().values(seq=next_message_seq()).returning(t.messages.c.seq)


def insert_message(conn: sa.Connection, session_id: str, run_id: str, step: int | None, kind: str, body: Any) -> int:
    """One statement: the number is the session's next, read by the insert itself (under the
    session's lock, which every writer of its messages holds)."""
    params = {"w_session_id": session_id, "session_id": session_id, "run_id": run_id, "step": step, "kind": kind, "body": body, "created_at": now()}
    return int(conn.execute(_INSERT_MESSAGE, params).scalar_one())
