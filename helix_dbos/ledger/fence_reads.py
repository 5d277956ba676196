"""The run fence's reads: the fence's own statement, and the reads that carry its conditions beside
what a transaction reads anyway (the step's calls for the gate and the step commit, the session's
new messages for a model request).

The fence's judgement (which workflow is asking, what a refusal says) is the runtime's
(``runtime/floor/fence.py``); the statements are here, with every other query. One of the fence's
conditions is DBOS's status of the run's workflow, a table of DBOS's that the ledger does not
describe: each function takes the expression that reads it (``status_of``, the runtime's
``dbos_private.workflow_status_of``) so the ledger never imports DBOS's internals.

Every statement is built once per dialect (and ``status_of``) with bound parameters: these run in
nearly every transaction of a run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

import sqlalchemy as sa

from . import tables as t
from . import tx_marks
from .rows import fetch_all, fetch_one

#: ``status_of(workflow_id_expression, sqlite=...)``: DBOS's status of that workflow as a scalar subquery.
StatusOf = Callable[..., Any]

#: The fence's conditions as ``head_columns`` labels them.
HEAD_KEYS: Final = ("fence_status", "fence_current", "fence_stop", "fence_dbos")
#: ``HEAD_KEYS`` and the run's agent, as the fused calls read returns them beside each call.
CALLS_HEAD_KEYS: Final = (*HEAD_KEYS, "fence_agent")


def fence_row(conn: sa.Connection, run_id: str, status_of: StatusOf) -> dict[str, Any] | None:
    """The run's row with ``session_current_run_id``, ``stop_kind`` and ``dbos_status``, the session
    row locked (Postgres, exclusive: nearly every transaction of a run then bumps the session's
    event counter, and two share-holders upgrading to that update would deadlock each other)."""
    return fetch_one(conn, _fence_statement(conn.dialect.name, status_of), {"w_run_id": run_id})


@functools.cache
def _fence_statement(dialect: str, status_of: StatusOf) -> sa.Select[Any]:
    stmt = (
        sa.select(t.runs, t.sessions.c.current_run_id.label("session_current_run_id"), t.stops.c.kind.label("stop_kind"),
                  status_of(t.runs.c.run_id, sqlite=dialect == "sqlite").label("dbos_status"))
        .join(t.sessions, t.sessions.c.session_id == t.runs.c.session_id)
        .outerjoin(t.stops, t.stops.c.run_id == t.runs.c.run_id)
        .where(t.runs.c.run_id == sa.bindparam("w_run_id"))
    )
    # SQLite renders no FOR UPDATE; the clause makes its engine take the write lock first (ledger/engine.py).
    return stmt.with_for_update(of=t.sessions)


def head_columns(run_id: Any, session_id: Any, status_of: StatusOf, *, sqlite: bool) -> list[Any]:
    """The fence's conditions as labelled scalar subqueries (``HEAD_KEYS``), read unlocked beside
    what a statement reads anyway."""
    of_run = t.runs.c.run_id == run_id
    return [
        sa.select(t.runs.c.status).where(of_run).scalar_subquery().label("fence_status"),
        sa.select(t.sessions.c.current_run_id).where(t.sessions.c.session_id == session_id).scalar_subquery().label("fence_current"),
        sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id).scalar_subquery().label("fence_stop"),
        status_of(run_id, sqlite=sqlite).label("fence_dbos"),
    ]


def locked_head(run_id: Any, status_of: StatusOf, *carried: Any) -> Any:
    """The fence's conditions as a Postgres CTE that takes the session row's lock, for a statement
    that locks rows of its own after it. Its columns are ``CALLS_HEAD_KEYS``.

    The session row is locked before any row of the outer statement: the outer rows are locked at
    the top of its plan, after the join that first scans this CTE. That is the fence's order (the
    session first), which the result write keeps too, so two transactions of one session never
    hold each other's rows.

    ``carried``: labelled values the CTE hands on as columns, for the outer statement to join on
    (``_calls_pg``)."""
    return (
        sa.select(
            t.runs.c.status.label("fence_status"),
            t.sessions.c.current_run_id.label("fence_current"),
            sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id).scalar_subquery().label("fence_stop"),
            status_of(run_id, sqlite=False).label("fence_dbos"),
            t.runs.c.agent_name.label("fence_agent"),
            *carried,
        )
        .select_from(t.runs.join(t.sessions, t.sessions.c.session_id == t.runs.c.session_id))
        .where(t.runs.c.run_id == run_id)
        .with_for_update(of=t.sessions)
        .cte("fenced")
    )


def calls_beside_fence(conn: sa.Connection, run_id: str, saver: str, step: int, status_of: StatusOf, *, for_update: bool = False) -> list[dict[str, Any]]:
    """The calls ``saver`` saved at ``step``, each with the fence's conditions for ``run_id``
    (``CALLS_HEAD_KEYS``): on SQLite read beside the calls, the database's write lock taken first,
    on Postgres ``locked_head`` joined to them (the session row locked first; the calls too with
    ``for_update``). No row when the step saved no call."""
    sqlite = conn.dialect.name == "sqlite"
    stmt = _calls_sqlite(status_of) if sqlite else _calls_pg(status_of, for_update)
    return fetch_all(conn, stmt, {"w_run_id": run_id, "w_saver": saver, "w_step": step})


@functools.cache
def _calls_sqlite(status_of: StatusOf) -> sa.Select[Any]:
    run_id: sa.BindParameter[str] = sa.bindparam("w_run_id")
    session = sa.select(t.runs.c.session_id).where(t.runs.c.run_id == run_id).scalar_subquery()
    return (
        sa.select(
            t.calls,
            tx_marks.escaped_column(),
            *head_columns(run_id, session, status_of, sqlite=True),
            sa.select(t.runs.c.agent_name).where(t.runs.c.run_id == run_id).scalar_subquery().label("fence_agent"),
        )
        .where(t.calls.c.run_id == sa.bindparam("w_saver"), t.calls.c.step == sa.bindparam("w_step"))
        .order_by(t.calls.c.position)
        .with_for_update()  # renders nothing: the engine takes the write lock before the read (ledger/engine.py)
    )


@functools.cache
def _calls_pg(status_of: StatusOf, for_update: bool) -> sa.Select[Any]:
    """The step's calls are joined on the saver and step the CTE carries, not compared with the
    parameters themselves: the CTE is materialized (it locks), so the planner estimates the calls
    of a step the same way whatever the values, and the server's plan cache keeps one generic plan.
    Compared with the parameters, a custom plan looked cheaper than the generic one whenever the
    calls' statistics predated the run (a new run id is no value the statistics hold: ~1 row, the
    generic plan ~rows / distinct run ids), so under a growing ledger the statement was planned
    again at each of its ~20 executions a run (``docs/benchmarks.md``)."""
    saver = sa.cast(sa.bindparam("w_saver"), sa.String).label("fence_saver")
    step = sa.cast(sa.bindparam("w_step"), sa.Integer).label("fence_step")
    head = locked_head(sa.bindparam("w_run_id"), status_of, saver, step)
    on = sa.and_(t.calls.c.run_id == head.c.fence_saver, t.calls.c.step == head.c.fence_step)
    stmt = (
        sa.select(t.calls, tx_marks.escaped_column(), *(head.c[k] for k in CALLS_HEAD_KEYS))
        .select_from(head.join(t.calls, on))
        .order_by(t.calls.c.position)
    )
    return stmt.with_for_update(of=t.calls) if for_update else stmt


def messages_beside_fence(conn: sa.Connection, run_id: str, session_id: str, after_seq: int, status_of: StatusOf) -> list[sa.Row[Any]]:
    """A model request's read, one statement whether or not anything was added: the fence's
    conditions (``HEAD_KEYS``, unlocked), how many of the session's messages are ``superseded``
    (a rewind since a cache was filled changes it), and the active messages after ``after_seq``
    (``seq``, ``body``; one row of NULLs when there is none), in order."""
    stmt = _messages_statement(conn.dialect.name == "sqlite", status_of)
    return list(conn.execute(stmt, {"w_run_id": run_id, "w_session_id": session_id, "w_after": after_seq}).all())


@functools.cache
def _messages_statement(sqlite: bool, status_of: StatusOf) -> sa.Select[Any]:
    m = t.messages.c
    run_id: sa.BindParameter[str] = sa.bindparam("w_run_id")
    session_id: sa.BindParameter[str] = sa.bindparam("w_session_id")
    head = sa.select(
        *head_columns(run_id, session_id, status_of, sqlite=sqlite),
        sa.select(sa.func.count()).select_from(t.messages).where(m.session_id == session_id, m.superseded_by.is_not(None)).scalar_subquery().label("superseded"),
    ).subquery()
    joined = head.outerjoin(t.messages, sa.and_(m.session_id == session_id, m.superseded_by.is_(None), m.seq > sa.bindparam("w_after")))
    return sa.select(head, m.seq, m.body).select_from(joined).order_by(m.seq)
