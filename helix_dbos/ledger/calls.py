"""The ``calls`` table: the tool calls of saved replies, their settling (by a body, recovery, a stop,
a failure or a client's answer) and reopening, the child session a call is bound to, and the
reads by step, by session and by run. A body's attempt and result write are ``attempts``'.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from . import tx_marks
from .attempts import close_open_attempts
from .events import emit
from .records import CallRow, CheckOutcome
from .rows import by_key, fetch_all, fetch_one, insert_rows, now
from .statuses import CALL_SETTLED, CALL_UNRESOLVED


def bind_child(conn: sa.Connection, dispatch_id: str, child_session_id: str) -> None:
    """Bind the call to the session that answers it (a sub-agent's, or a companion's)."""
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(child_session_id=child_session_id))


def record_approval(conn: sa.Connection, dispatch_id: str, approved: bool, reason: str | None, actor: str | None, at: datetime | None = None) -> None:
    """``at``: the answer's time, minted by the entry before its first try (``answered_at``)."""
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == dispatch_id)
        .values(approved=approved, approval_reason=reason, approval_actor=actor, answered_at=at or now())
    )


def mark_answered(conn: sa.Connection, dispatch_id: str, at: datetime | None = None) -> None:
    """A client answered the call (its result is settled separately); ``at`` as for ``record_approval``."""
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(answered_at=at or now()))


def answered_at(conn: sa.Connection, dispatch_id: str, at: datetime) -> bool:
    """Whether the call's answer is the one stamped ``at`` (compared in SQL: the stored form of a
    time differs between the databases, the bound one the same way)."""
    o = t.calls.c
    return conn.execute(sa.select(o.dispatch_id).where(o.dispatch_id == dispatch_id, o.answered_at == at)).first() is not None


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
    """The calls one run saved at one step, in reply order (locked with ``for_update``: on SQLite the write lock, ``ledger/engine.py``)."""
    stmt = _of_step(for_update)
    return cast("list[CallRow]", fetch_all(conn, stmt, {"w_run_id": run_id, "w_step": step}))


@functools.cache
def _of_step(for_update: bool) -> sa.Select[Any]:
    stmt = (
        sa.select(t.calls, tx_marks.escaped_column())
        .where(t.calls.c.run_id == sa.bindparam("w_run_id"), t.calls.c.step == sa.bindparam("w_step"))
        .order_by(t.calls.c.position)
    )
    return stmt.with_for_update(of=t.calls) if for_update else stmt


def saver_of_active_step(conn: sa.Connection, session_id: str, step: int) -> str | None:
    """The run that saved the calls of ``step`` among the session's active (not superseded)
    checkpoints: a suspension may be committed by a later run than the one that saved its calls."""
    active = sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.session_id == session_id, t.checkpoints.c.superseded_by.is_(None))
    stmt = sa.select(t.calls.c.run_id).where(t.calls.c.session_id == session_id, t.calls.c.step == step, t.calls.c.checkpoint_id.in_(active)).limit(1)
    saver: str | None = conn.execute(stmt).scalar()
    return saver


def insert_calls(conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """A step's calls, in one statement on Postgres (``rows.insert_rows``: an executemany would be
    one statement per row on the server, a parse, a plan lookup and an executor start each)."""
    ts = now()
    insert_rows(conn, t.calls, [{"created_at": ts, **r} for r in rows])


def calls_of_checkpoint(conn: sa.Connection, checkpoint_id: str) -> list[CallRow]:
    return cast("list[CallRow]", fetch_all(
        conn, sa.select(t.calls).where(t.calls.c.checkpoint_id == checkpoint_id).order_by(t.calls.c.position)
    ))


def get_call(conn: sa.Connection, dispatch_id: str, *, for_update: bool = False) -> CallRow | None:
    return cast("CallRow | None", fetch_one(conn, by_key(t.calls, "dispatch_id", for_update), {"w_key": dispatch_id}))


def list_calls(
    conn: sa.Connection,
    *,
    session_id: str | None = None,
    status: str | None = None,
    tool_name: str | None = None,
    limit: int = 500,
) -> list[CallRow]:
    stmt = sa.select(t.calls)
    if session_id:
        stmt = stmt.where(t.calls.c.session_id == session_id)
    if status:
        stmt = stmt.where(t.calls.c.status == status)
    if tool_name:
        stmt = stmt.where(t.calls.c.tool_name == tool_name)
    return cast("list[CallRow]", fetch_all(conn, stmt.order_by(t.calls.c.created_at, t.calls.c.step, t.calls.c.position).limit(limit)))


def mark_decided(conn: sa.Connection, dispatch_id: str, by: str) -> None:
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(decided_by=by))


def record_check(conn: sa.Connection, call: CallRow, outcome: CheckOutcome | None) -> None:
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == call["dispatch_id"]).values(check_outcome=outcome))


def settle_call(
    conn: sa.Connection,
    call: CallRow,
    status: str,
    *,
    run_id: str,
    paired_by: str,
    note: str | None = None,
    result: Any = None,
    error: Any = None,
    reason: str = "",
) -> None:
    """Answer a call without (or instead of) a body: recovery, redirect, stop, failure or an answer.

    Any attempt still open is closed ``lost``: its body's result will never be the answer (a late
    write of it is refused and marks it ``refused``), and no attempt row stays open on a settled call.
    """
    close_open_attempts(conn, call["dispatch_id"])
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == call["dispatch_id"])
        .values(
            status=status,
            outcome_note=note,
            result=result,
            error=error,
            paired_by=paired_by,
            settled_run_id=run_id,
            ended_at=now(),
        )
    )
    emit(
        conn,
        call["session_id"],
        run_id,
        "call_paired" if paired_by != "body" else "tool_end",
        {
            "dispatch_id": call["dispatch_id"],
            "tool_name": call["tool_name"],
            "status": status,
            "note": note,
            "paired_by": paired_by,
            "reason": reason,
        },
    )


def reopen_call(conn: sa.Connection, call: CallRow) -> None:
    """retry(): undo a failed run's pairing, keeping the attempts so recovery still counts bodies."""
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == call["dispatch_id"])
        .values(
            status="running" if call["attempts"] else ("pending" if call["requires_approval"] else "saved"),
            outcome_note=None,
            paired_by=None,
            settled_run_id=None,
            ended_at=None,
        )
    )


def unresolved_calls_of_run(conn: sa.Connection, run_id: str) -> list[CallRow]:
    return cast("list[CallRow]", fetch_all(
        conn,
        sa.select(t.calls)
        .where(t.calls.c.run_id == run_id, t.calls.c.status.in_(CALL_UNRESOLVED | {"pending"}))
        .order_by(t.calls.c.step, t.calls.c.position),
    ))


def note_escaped(conn: sa.Connection, dispatch_id: str, note: str) -> None:
    """The call's body committed its transaction itself: the model is told so (``note``), and the call
    no longer counts as decided by the database (its effect may exist apart from any result)."""
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(outcome_note=note, transactional=False))

