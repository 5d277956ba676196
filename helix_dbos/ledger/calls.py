"""Writes to a ``calls`` row beyond its settle: the child session it is bound to, a client's answer.

Settling and reopening a call (with its attempts and events) stay with ``store``.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import CallRow
from .statuses import CALL_SETTLED
from .store import fetch_all, now


def bind_child(conn: sa.Connection, dispatch_id: str, child_session_id: str) -> None:
    """Bind the call to the session that answers it (a sub-agent's, or a companion's)."""
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(child_session_id=child_session_id))


def record_approval(conn: sa.Connection, dispatch_id: str, approved: bool, reason: str | None, actor: str | None) -> None:
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == dispatch_id)
        .values(approved=approved, approval_reason=reason, approval_actor=actor, answered_at=now())
    )


def mark_answered(conn: sa.Connection, dispatch_id: str) -> None:
    """A client answered the call (its result is settled separately)."""
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(answered_at=now()))


def step_of(conn: sa.Connection, dispatch_id: str) -> tuple[str, int] | None:
    """The (run id, step) whose reply made the call."""
    row = conn.execute(sa.select(t.calls.c.run_id, t.calls.c.step).where(t.calls.c.dispatch_id == dispatch_id)).first()
    return None if row is None else (row[0], row[1])


def pending_of_session(conn: sa.Connection, session_id: str) -> list[CallRow]:
    """The session's pending calls, in reply order."""
    stmt = sa.select(t.calls).where(t.calls.c.session_id == session_id, t.calls.c.status == "pending").order_by(t.calls.c.step, t.calls.c.position)
    return cast("list[CallRow]", fetch_all(conn, stmt))


def unanswered_steps_superseded_by(conn: sa.Connection, run_id: str) -> list[tuple[str, int]]:
    """(saver run, step) of every unanswered call on the branch ``run_id``'s rewind superseded."""
    superseded = sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.superseded_by == run_id)
    rows = conn.execute(
        sa.select(t.calls.c.run_id, t.calls.c.step)
        .where(t.calls.c.checkpoint_id.in_(superseded), t.calls.c.status.not_in(CALL_SETTLED))
        .distinct()
    ).all()
    return [(r[0], r[1]) for r in rows]


def of_step(conn: sa.Connection, run_id: str, step: int, *, for_update: bool = False) -> list[CallRow]:
    """The calls one run saved at one step, in reply order (locked on Postgres with ``for_update``)."""
    stmt = _of_step(for_update and conn.dialect.name == "postgresql")
    return cast("list[CallRow]", fetch_all(conn, stmt, {"w_run_id": run_id, "w_step": step}))


@functools.cache
def _of_step(for_update: bool) -> sa.Select[Any]:
    stmt = sa.select(t.calls).where(t.calls.c.run_id == sa.bindparam("w_run_id"), t.calls.c.step == sa.bindparam("w_step")).order_by(t.calls.c.position)
    return stmt.with_for_update() if for_update else stmt


def saver_of_active_step(conn: sa.Connection, session_id: str, step: int) -> str | None:
    """The run that saved the calls of ``step`` among the session's active (not superseded)
    checkpoints: a suspension may be committed by a later run than the one that saved its calls."""
    active = sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.session_id == session_id, t.checkpoints.c.superseded_by.is_(None))
    stmt = sa.select(t.calls.c.run_id).where(t.calls.c.session_id == session_id, t.calls.c.step == step, t.calls.c.checkpoint_id.in_(active)).limit(1)
    saver: str | None = conn.execute(stmt).scalar()
    return saver
