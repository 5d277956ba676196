"""The ``sessions`` table: a session's row, its creation and the run-start gate's compare-and-set.

A run's end releases the session with the run's own row (``runs.end_run``).
"""

from __future__ import annotations

import functools
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import SessionRow
from .rows import by_key, fetch_all, fetch_one, insert_if_absent, now


def get_session(conn: sa.Connection, session_id: str, *, for_update: bool = False) -> SessionRow | None:
    return cast("SessionRow | None", fetch_one(conn, by_key(t.sessions, "session_id", for_update), {"w_key": session_id}))


def list_sessions(conn: sa.Connection, limit: int = 50, *, owner: str | None = None, status: str | None = None, agent_name: str | None = None) -> list[SessionRow]:
    """The newest sessions first; ``owner``/``status``/``agent_name`` narrow the list when given."""
    stmt = sa.select(t.sessions)
    if owner is not None:
        stmt = stmt.where(t.sessions.c.owner == owner)
    if status is not None:
        stmt = stmt.where(t.sessions.c.status == status)
    if agent_name is not None:
        stmt = stmt.where(t.sessions.c.agent_name == agent_name)
    return cast("list[SessionRow]", fetch_all(conn, stmt.order_by(t.sessions.c.updated_at.desc()).limit(limit)))


def _parent_owner(conn: sa.Connection, parent_dispatch_id: str) -> str | None:
    stmt = sa.select(t.sessions.c.owner).join(t.calls, t.calls.c.session_id == t.sessions.c.session_id).where(t.calls.c.dispatch_id == parent_dispatch_id)
    return conn.execute(stmt).scalar()


def new_session_row(
    session_id: str, agent_name: str, *, owner: str | None, parent_dispatch_id: str | None = None, claimed_by: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A new session's row (every column): ``claimed_by`` (run id, status) as ``insert_session``'s."""
    ts = now()
    run_id, status = claimed_by if claimed_by is not None else (None, "new")
    return {
        "session_id": session_id,
        "agent_name": agent_name,
        "status": status,
        "current_run_id": run_id,
        "version": 0 if run_id is None else 1,
        "event_seq": 0,
        "run_count": 0 if run_id is None else 1,
        "parent_dispatch_id": parent_dispatch_id,
        "owner": owner,
        "created_at": ts,
        "updated_at": ts,
    }


def insert_session(
    conn: sa.Connection,
    session_id: str,
    agent_name: str,
    parent_dispatch_id: str | None = None,
    *,
    owner: str | None = None,
    claimed_by: tuple[str, str] | None = None,
) -> SessionRow | None:
    """Create the session row and return it; None if it exists already (a concurrent entry created it first).

    Without ``ON CONFLICT``, two entries that both found no session raced to insert it and the loser
    met a raw primary-key violation: now the loser learns it lost, and the gate refuses it typed.
    A child session inherits its parent's owner, so delegation never widens who sees it. The row
    comes back from the insert itself: no other transaction sees it (nor can lock it) before this
    one commits, so an entry needs no second read of the session it just created.

    ``claimed_by`` (run id, status): the row is inserted with the run-start gate already won by that
    run, as ``claim_session`` would leave it (version 1, one run), so a new session's first entry
    costs one statement less: nobody else can hold a version of a row this transaction creates.
    """
    if owner is None and parent_dispatch_id is not None:
        owner = _parent_owner(conn, parent_dispatch_id)
    return insert_session_row(conn, new_session_row(session_id, agent_name, owner=owner, parent_dispatch_id=parent_dispatch_id, claimed_by=claimed_by))


def insert_session_row(conn: sa.Connection, values: dict[str, Any]) -> SessionRow | None:
    """Insert ``new_session_row``'s values unless the id is taken; the row, or None."""
    row = conn.execute(_insert_session(conn.dialect.name), values).mappings().first()
    return cast("SessionRow", dict(row)) if row is not None else None


@functools.cache
def _insert_session(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING`` the row, built once per dialect (values bound
    per call): building it per entry cost more Python than the entry's other statements together."""
    return insert_if_absent(dialect, t.sessions).returning(*t.sessions.c)  # rowcount is -1 for this statement on psycopg


def claim_session(conn: sa.Connection, session: SessionRow, run_id: str, status: str = "running") -> bool:
    """The run-start gate: one compare-and-set on the session's version. True if this entry won."""
    result = conn.execute(
        t.sessions.update()
        .where(t.sessions.c.session_id == session["session_id"], t.sessions.c.version == session["version"])
        .values(
            status=status,
            current_run_id=run_id,
            version=t.sessions.c.version + 1,
            run_count=t.sessions.c.run_count + 1,
            updated_at=now(),
        )
    )
    return result.rowcount == 1
