"""Reads of the ``runs`` table by executor: which runs a process owns (its wake, its operator view).

Opening and ending a run stay with ``store`` (the session row moves with them).
"""

from __future__ import annotations

import sqlalchemy as sa

from . import tables as t


def running_of_executor(conn: sa.Connection, executor_id: str) -> list[str]:
    """Ids of the runs the ledger still says are running on ``executor_id``."""
    stmt = sa.select(t.runs.c.run_id).where(t.runs.c.status == "running", t.runs.c.executor_id == executor_id)
    return list(conn.execute(stmt).scalars().all())


def count_of_executor(conn: sa.Connection, executor_id: str) -> int:
    """How many runs (any status) ``executor_id`` ever ran."""
    return int(conn.execute(sa.select(sa.func.count()).select_from(t.runs).where(t.runs.c.executor_id == executor_id)).scalar() or 0)
