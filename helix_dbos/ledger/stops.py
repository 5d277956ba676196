"""The ``stops`` table: one durable stop record per run, read by the fence before each model
request and body start."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from . import tables as t
from .events import emit
from .rows import fetch_one, now


def request_stop(conn: sa.Connection, session_id: str, run_id: str, kind: str, requested_by: str | None, at: datetime | None = None) -> bool:
    """One durable stop record per run; a second stop of the same run changes nothing.

    ``at``: the stop's time, minted by an entry before its first try (``requested_at``), so that a
    retry after a lost commit acknowledgement finds its own record (``stop_at``)."""
    if fetch_one(conn, sa.select(t.stops).where(t.stops.c.run_id == run_id)) is not None:
        return False
    conn.execute(
        t.stops.insert().values(
            run_id=run_id, session_id=session_id, kind=kind, requested_by=requested_by, requested_at=at or now()
        )
    )
    emit(conn, session_id, run_id, "stop_requested", {"kind": kind, "requested_by": requested_by})
    return True


def stop_at(conn: sa.Connection, session_id: str, at: datetime) -> str | None:
    """The run of the session's stop record stamped ``at`` (compared in SQL, as ``calls.answered_at``),
    if any; found through the session's runs (stops are keyed by run, and have no session index)."""
    s = t.stops.c
    runs = sa.select(t.runs.c.run_id).where(t.runs.c.session_id == session_id)
    return conn.execute(sa.select(s.run_id).where(s.run_id.in_(runs), s.requested_at == at)).scalar()


def stop_of(conn: sa.Connection, run_id: str) -> str | None:
    return conn.execute(sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id)).scalar()
