"""The ``session_deps`` table: a session's deps input, one JSON row per session.

Written in the transaction that admits the run bringing it, read back by that run's scope in any
process (see ``runtime/flow/scopes.py`` for why it is JSON and never pickled).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from . import tables as t


def put(conn: sa.Connection, session_id: str, row: dict[str, Any]) -> None:
    """Replace the session's deps row, or insert it if it has none."""
    updated = conn.execute(sa.update(t.session_deps).where(t.session_deps.c.session_id == session_id).values(**row))
    if not updated.rowcount:
        conn.execute(sa.insert(t.session_deps).values(**row))


def data_of(conn: sa.Connection, session_id: str) -> Any:
    return conn.execute(sa.select(t.session_deps.c.data).where(t.session_deps.c.session_id == session_id)).scalar()
