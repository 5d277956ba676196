"""The ``companions`` table: one long-lived sub-agent per (parent session, agent), and its incarnations.

The rules (who mints, who restarts, who closes, under which row lock) are ``runtime/flow/companions.py``'s;
here are the statements.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import CompanionRow
from .rows import now
from .statuses import CALL_SETTLED


def get(conn: sa.Connection, *, companion_session_id: str | None = None,
        parent_session_id: str | None = None, agent_name: str | None = None,
        for_update: bool = False) -> CompanionRow | None:
    """By its session id, or by (parent session, agent); ``for_update`` locks the row (SQLite: the write lock, ``ledger/engine.py``)."""
    stmt = sa.select(t.companions)
    if companion_session_id is not None:
        stmt = stmt.where(t.companions.c.companion_session_id == companion_session_id)
    else:
        stmt = stmt.where(t.companions.c.parent_session_id == parent_session_id, t.companions.c.agent_name == agent_name)
    if for_update:
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).mappings().first()
    return cast("CompanionRow | None", dict(row) if row is not None else None)


def waiting_turns(conn: sa.Connection, companion_session_id: str) -> list[str]:
    """Calls bound to this companion, still unanswered, whose turn has not begun: someone is waiting."""
    begun = sa.select(t.runs.c.run_id).where(t.runs.c.session_id == companion_session_id)
    rows = conn.execute(
        sa.select(t.calls.c.dispatch_id).where(
            t.calls.c.child_session_id == companion_session_id,
            t.calls.c.kind == "companion",
            t.calls.c.status.not_in(CALL_SETTLED),
            t.calls.c.dispatch_id.not_in(begun),
        )
    )
    return [r[0] for r in rows]


def insert(conn: sa.Connection, row: dict[str, Any]) -> None:
    conn.execute(t.companions.insert().values(**row))


def new_incarnation(conn: sa.Connection, companion_session_id: str, incarnation: int, workflow_id: str, at: Any) -> None:
    conn.execute(
        t.companions.update()
        .where(t.companions.c.companion_session_id == companion_session_id)
        .values(incarnation=incarnation, workflow_id=workflow_id, status="live", updated_at=at)
    )


def mark_lost(conn: sa.Connection, workflow_id: str) -> None:
    """The incarnation running as ``workflow_id`` is gone (if it is still the live one)."""
    conn.execute(
        t.companions.update()
        .where(t.companions.c.workflow_id == workflow_id, t.companions.c.status == "live")
        .values(status="lost", updated_at=now())
    )


def turn_answered(conn: sa.Connection, companion_session_id: str, dispatch_id: str) -> None:
    conn.execute(
        t.companions.update()
        .where(t.companions.c.companion_session_id == companion_session_id)
        .values(last_dispatch_id=dispatch_id, updated_at=now())
    )


def close(conn: sa.Connection, companion_session_id: str) -> None:
    conn.execute(
        t.companions.update()
        .where(t.companions.c.companion_session_id == companion_session_id)
        .values(status="closed", updated_at=now())
    )
