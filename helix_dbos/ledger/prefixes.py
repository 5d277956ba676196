"""Ids by their first characters: tables print ids shortened, and a user types back a prefix.

The prefix is matched literally (``%`` and ``_`` in it are escaped), on the indexed id columns.
"""

from __future__ import annotations

import sqlalchemy as sa

from . import tables as t


def session_ids_starting(conn: sa.Connection, prefix: str, limit: int = 50) -> list[str]:
    stmt = sa.select(t.sessions.c.session_id).where(t.sessions.c.session_id.startswith(prefix, autoescape=True)).limit(limit)
    return [str(r) for r in conn.execute(stmt).scalars()]


def dispatch_ids_starting(conn: sa.Connection, session_id: str, prefix: str, limit: int = 50) -> list[str]:
    """Dispatch ids of ``session_id``'s calls that start with ``prefix``."""
    stmt = sa.select(t.calls.c.dispatch_id).where(t.calls.c.session_id == session_id, t.calls.c.dispatch_id.startswith(prefix, autoescape=True)).limit(limit)
    return [str(r) for r in conn.execute(stmt).scalars()]
