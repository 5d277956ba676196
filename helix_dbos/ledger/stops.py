"""The ``stops`` table: one durable stop record per run, read by the fence before each model
request and body start."""

from __future__ import annotations

import sqlalchemy as sa

from . import tables as t
from .events import emit
from .rows import fetch_one, now


def request_stop(conn: sa.Connection, session_id: str, run_id: str, kind: str, requested_by: str | None) -> bool:
    """One durable stop record per run; a second stop of the same run changes nothing."""
    if fetch_one(conn, sa.select(t.stops).where(t.stops.c.run_id == run_id)) is not None:
        return False
    conn.execute(
        t.stops.insert().values(
            run_id=run_id, session_id=session_id, kind=kind, requested_by=requested_by, requested_at=now()
        )
    )
    emit(conn, session_id, run_id, "stop_requested", {"kind": kind, "requested_by": requested_by})
    return True


def stop_of(conn: sa.Connection, run_id: str) -> str | None:
    return conn.execute(sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id)).scalar()
