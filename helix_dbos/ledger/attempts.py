"""A call's two facts on the ledger: its attempt, committed before the body starts, and the
body's result, fenced by the attempt number (and, on the short path, by the run still owning its
session), and what the ledger reads of them. These are the write path's hottest statements, each built
once and, on Postgres, folded into one statement where the table allows (docs/architecture.md,
"Statements, not only transactions").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .events import emit, emit_statement, held, holding
from .records import AttemptRow, CallRow
from .rows import fetch_all, fetch_one, now

_INSERT_ATTEMPT = t.attempts.insert()


def start_attempt(
    conn: sa.Connection, call: CallRow, run_id: str, executor_id: str | None, *, transactional: bool = False, token: str | None = None,
    at: datetime | None = None,
) -> int:
    """Commit a body start before the body runs: a re-executed step then knows a body may have run.

    For a transactional body this row is only a marker (it carries no effect: the body's writes
    commit with its result); it still counts toward the 3-body limit. A body that runs outside a
    transaction clears the call's ``transactional`` mark for good: its effect may exist alone.
    ``at``: the start's time (now by default), for a caller that keeps the call's row as written.
    """
    attempt = int(call["attempts"]) + 1
    ts = at or now()
    if call.get("transactional") and not transactional:
        conn.execute(t.calls.update().where(t.calls.c.dispatch_id == call["dispatch_id"]).values(transactional=False))
    # An earlier attempt still open lost its process (recovery is starting this one): close it, so
    # no attempt stays open; a late write of it is refused all the same (the call moved on).
    if attempt > 1:
        close_open_attempts(conn, call["dispatch_id"])
    data = {"dispatch_id": call["dispatch_id"], "tool_name": call["tool_name"], "attempt": attempt, "args": call["args"]}
    if conn.dialect.name == "postgresql":  # one statement: the attempt, the call's status, the event
        # the event held back to the transaction's end (``events.one_bump``): the statement without it
        event_held = held(conn, call["session_id"], run_id, "tool_start", data)
        conn.execute(
            _start_attempt_pg(event_held),
            {"w_dispatch_id": call["dispatch_id"], "w_run_id": run_id, "w_session_id": call["session_id"], "p_attempt": attempt,
             "p_executor_id": executor_id, "p_ts": ts, "p_token": token, "p_started_at": call["started_at"] or ts,
             "p_run_id": run_id, "p_type": "tool_start", "p_data": data, "p_created_at": ts},
        )
        return attempt
    # SQLite: the attempt's INSERT also marks the call running (trigger ``attempts_mark_call``, 0011)
    conn.execute(_INSERT_ATTEMPT, {"dispatch_id": call["dispatch_id"], "attempt": attempt, "run_id": run_id, "executor_id": executor_id, "started_at": ts, "token": token})
    emit(conn, call["session_id"], run_id, "tool_start", data)
    return attempt


@functools.cache
def _start_attempt_pg(event_held: bool = False) -> sa.Insert | sa.Update:
    opened = (
        t.attempts.insert()
        .values(dispatch_id=sa.bindparam("w_dispatch_id"), attempt=sa.bindparam("p_attempt"), run_id=sa.bindparam("w_run_id"),
                executor_id=sa.bindparam("p_executor_id"), started_at=sa.bindparam("p_ts"), token=sa.bindparam("p_token"))
        .cte("opened")
    )
    mark = (
        t.calls.update()
        .where(t.calls.c.dispatch_id == sa.bindparam("w_dispatch_id"))
        .values(status="running", attempts=sa.bindparam("p_attempt"), started_at=sa.bindparam("p_started_at"))
    )
    if event_held:
        return mark.add_cte(opened)
    return emit_statement(True).add_cte(opened, mark.cte("marked"))  # the event's binds: emit's


_WRITE_RESULT = (
    t.calls.update()
    .where(t.calls.c.dispatch_id == sa.bindparam("w_dispatch_id"), t.calls.c.attempts == sa.bindparam("w_attempt"), t.calls.c.status == "running")
    .returning(t.calls.c.session_id, t.calls.c.tool_name)
)
_END_ATTEMPT = t.attempts.update().where(
    t.attempts.c.dispatch_id == sa.bindparam("w_dispatch_id"),
    t.attempts.c.attempt == sa.bindparam("w_attempt"),
    sa.or_(t.attempts.c.outcome.is_(None), t.attempts.c.outcome == "lost"),
)


def record_result(
    conn: sa.Connection,
    dispatch_id: str,
    attempt: int,
    run_id: str,
    status: str,
    *,
    result: Any = None,
    error: Any = None,
) -> bool:
    """Write a body's answer, fenced by its attempt number; False means the write was refused.

    A late body of a lost run finds a newer attempt (or an answer recovery already gave) and its
    result is not written: its external effect may have happened, its ledger write does not.
    """
    ts = now()
    call = conn.execute(
        _WRITE_RESULT,
        {"w_dispatch_id": dispatch_id, "w_attempt": attempt, "status": status, "result": result, "error": error, "paired_by": "body", "settled_run_id": run_id, "ended_at": ts},
    ).mappings().first()
    written = call is not None
    conn.execute(_END_ATTEMPT, {"w_dispatch_id": dispatch_id, "w_attempt": attempt, "ended_at": ts, "outcome": status if written else "refused"})
    if call is not None:
        emit(
            conn,
            call["session_id"],
            run_id,
            "tool_end",
            {
                "dispatch_id": dispatch_id,
                "tool_name": call["tool_name"],
                "attempt": attempt,
                "status": status,
                "result": result,
                "error": error,
            },
        )
    return written


def record_result_fenced(
    conn: sa.Connection, dispatch_id: str, attempt: int, run_id: str, status: str, tool_name: str, *, result: Any = None, error: Any = None
) -> bool:
    """A body's answer when all is well, in as few statements as each database allows; False means
    nothing was written (the call moved on, or the run no longer owns its session) and the caller
    takes the full path (``record_result`` after the run fence), which says why.

    The run fence (the run still ``running`` and its session's current run) is a condition of the
    call's own UPDATE. Postgres: one statement, whose first CTE locks the session row as the fence
    does (before the call's row, the order every run transaction keeps), then the call, its
    attempt's end and the ``tool_end`` event. SQLite: the fenced UPDATE, the attempt, the event.
    """
    ts = now()
    data = {"dispatch_id": dispatch_id, "tool_name": tool_name, "attempt": attempt, "status": status, "result": result, "error": error}
    params = {"w_dispatch_id": dispatch_id, "w_attempt": attempt, "w_run_id": run_id, "p_status": status, "p_result": result,
              "p_error": error, "p_ts": ts}
    if conn.dialect.name == "postgresql":
        if not holding(conn):
            return conn.execute(_result_write_pg(), {**params, "p_data": data}).first() is not None
        # inside ``events.one_bump``: the statement without its event, which is held back if it wrote
        session = conn.execute(_result_write_pg(event_held=True), params).scalar()
        return session is not None and held(conn, session, run_id, "tool_end", data)
    written = conn.execute(_result_write_sqlite(), params).first()
    if written is None:
        return False
    conn.execute(_END_ATTEMPT, {"w_dispatch_id": dispatch_id, "w_attempt": attempt, "ended_at": ts, "outcome": status})
    emit(conn, written[0], run_id, "tool_end", data)
    return True


def _run_owns_session() -> sa.ColumnElement[bool]:
    """The run fence as a condition: run ``w_run_id`` is running and its session's current run."""
    return (t.runs.c.run_id == sa.bindparam("w_run_id")) & (t.runs.c.status == "running") & (
        t.sessions.c.current_run_id == sa.bindparam("w_run_id")
    )


def _result_update(owner: Any) -> sa.Update:
    return (
        t.calls.update()
        .where(
            t.calls.c.dispatch_id == sa.bindparam("w_dispatch_id"),
            t.calls.c.attempts == sa.bindparam("w_attempt"),
            t.calls.c.status == "running",
            owner,
        )
        .values(status=sa.bindparam("p_status"), result=sa.bindparam("p_result"), error=sa.bindparam("p_error"),
                paired_by="body", settled_run_id=sa.bindparam("w_run_id"), ended_at=sa.bindparam("p_ts"))
        .returning(t.calls.c.session_id)
    )


@functools.cache
def _result_write_sqlite() -> sa.Update:
    owner = sa.exists(sa.select(1).select_from(t.runs.join(t.sessions, t.sessions.c.session_id == t.runs.c.session_id)).where(_run_owns_session()))
    return _result_update(owner)


@functools.cache
def _result_write_pg(event_held: bool = False) -> sa.Insert | sa.Select[Any]:
    # The session row by its key, from the run's (a scalar subquery, not a join): planned on tables
    # whose statistics are still those of an empty ledger (a fresh database, a burst of sessions), a
    # join filtered on ``current_run_id`` (no index) was a sequential scan of every session per result.
    owner = (
        sa.select(t.runs.c.session_id)
        .where(t.runs.c.run_id == sa.bindparam("w_run_id"), t.runs.c.status == "running")
        .scalar_subquery()
    )
    fenced = (
        sa.select(t.sessions.c.session_id)
        .where(t.sessions.c.session_id == owner, t.sessions.c.current_run_id == sa.bindparam("w_run_id"))
        .with_for_update(of=t.sessions)
        .cte("fenced")
    )
    written = _result_update(t.calls.c.session_id.in_(sa.select(fenced.c.session_id))).cte("written")
    ended = (
        t.attempts.update()
        .where(
            t.attempts.c.dispatch_id == sa.bindparam("w_dispatch_id"),
            t.attempts.c.attempt == sa.bindparam("w_attempt"),
            sa.or_(t.attempts.c.outcome.is_(None), t.attempts.c.outcome == "lost"),
            sa.exists(sa.select(written.c.session_id)),
        )
        .values(ended_at=sa.bindparam("p_ts"), outcome=sa.bindparam("p_status"))
        .cte("ended")
    )
    if event_held:  # the call's session when it was written (Postgres runs every writable CTE, read or not)
        return sa.select(written.c.session_id).add_cte(fenced, written, ended)
    bumped = (
        t.sessions.update()
        .where(t.sessions.c.session_id.in_(sa.select(written.c.session_id)))
        .values(event_seq=t.sessions.c.event_seq + 1)
        .returning(t.sessions.c.session_id, t.sessions.c.event_seq)
        .cte("bumped")
    )
    event = sa.select(
        bumped.c.session_id,
        bumped.c.event_seq,
        sa.bindparam("w_run_id", type_=t.events.c.run_id.type),
        sa.literal("tool_end", t.events.c.type.type),
        sa.bindparam("p_data", type_=t.events.c.data.type),
        sa.bindparam("p_ts", type_=t.events.c.created_at.type),
    )
    stmt = t.events.insert().from_select(["session_id", "seq", "run_id", "type", "data", "created_at"], event).returning(t.events.c.seq)
    return stmt.add_cte(fenced, written, ended, bumped)


def refuse_attempt(conn: sa.Connection, dispatch_id: str, attempt: int) -> None:
    """Close an attempt whose result write was refused (its run lost the session, or a newer attempt
    exists): its external effect may have happened, its ledger write does not."""
    conn.execute(_END_ATTEMPT, {"w_dispatch_id": dispatch_id, "w_attempt": attempt, "ended_at": now(), "outcome": "refused"})


def attempts_of(conn: sa.Connection, dispatch_ids: Iterable[str]) -> dict[str, list[AttemptRow]]:
    ids = list(dispatch_ids)
    out: dict[str, list[AttemptRow]] = {d: [] for d in ids}
    if ids:
        for r in cast("list[AttemptRow]", fetch_all(
            conn, sa.select(t.attempts).where(t.attempts.c.dispatch_id.in_(ids)).order_by(t.attempts.c.attempt)
        )):
            out[r["dispatch_id"]].append(r)
    return out


def close_open_attempts(conn: sa.Connection, dispatch_id: str, outcome: str = "lost") -> None:
    """Close a call's open attempts: ``lost`` when it is answered without them, or what recovery
    proved about them (``rolled_back``, ``not_applied``: no effect; ``applied``: a check confirmed it)."""
    conn.execute(
        t.attempts.update()
        .where(t.attempts.c.dispatch_id == dispatch_id, t.attempts.c.outcome.is_(None))
        .values(ended_at=now(), outcome=outcome)
    )


def attempt_by_token(conn: sa.Connection, dispatch_id: str, token: str) -> AttemptRow | None:
    """The attempt a gate execution opened (its ``token``, written with it), if its commit went through."""
    return cast("AttemptRow | None", fetch_one(conn, sa.select(t.attempts).where(t.attempts.c.dispatch_id == dispatch_id, t.attempts.c.token == token)))
