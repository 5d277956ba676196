"""The ``executors`` and ``executor_takeovers`` tables: leases, their renewals and takeovers.

Why leases exist and who calls what is ``runtime/process/leases.py``'s story; here are only the
statements, each compared on the database's own clock (``db_now``) so every process agrees on time.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import sqlalchemy as sa

from . import tables as t
from .types import as_utc


def db_now(conn: sa.Connection) -> sa.ColumnElement[float]:
    """The database's clock in epoch seconds: every process compares leases on one clock."""
    if conn.dialect.name == "sqlite":
        return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)
    return sa.literal_column("EXTRACT(EPOCH FROM clock_timestamp())", sa.Float)


def register(conn: sa.Connection, executor_id: str, lease: float) -> int:
    """Start (or restart) this process's lease for ``executor_id``; returns its generation."""
    row = conn.execute(sa.select(t.executors.c.generation).where(t.executors.c.executor_id == executor_id)).first()
    generation = (int(row.generation) if row else 0) + 1
    values = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "generation": generation,
        "lease_seconds": lease,
        "started_epoch": db_now(conn),
        "renewed_epoch": db_now(conn),
        "released_epoch": None,
        "taken_over_by": None,
        "taken_over_epoch": None,
        "taken_runs": None,
    }
    if row is None:
        conn.execute(t.executors.insert().values(executor_id=executor_id, **values))
    else:
        conn.execute(t.executors.update().where(t.executors.c.executor_id == executor_id).values(**values))
    return generation


def renew(conn: sa.Connection, executor_id: str, generation: int) -> bool:
    """Renew the lease; False when it is no longer ours (taken over, or a newer process has the id)."""
    return (
        conn.execute(
            t.executors.update()
            .where(
                t.executors.c.executor_id == executor_id,
                t.executors.c.generation == generation,
                t.executors.c.taken_over_by.is_(None),
            )
            .values(renewed_epoch=db_now(conn))
        ).rowcount
        == 1
    )


def release(conn: sa.Connection, executor_id: str, generation: int) -> bool:
    """A clean shutdown: the lease ends now (its pending runs, if any, may be taken over at once).

    False when the lease was no longer ours (taken over while this process was frozen or cut off):
    the shutdown then ends the process the way the watchdog would have, so a cut-off worker says so
    (exit 75) however its last command happened to end, instead of by a race with the watchdog."""
    e = t.executors.c
    return (
        conn.execute(
            t.executors.update()
            .where(e.executor_id == executor_id, e.generation == generation, e.taken_over_by.is_(None))
            .values(released_epoch=db_now(conn))
        ).rowcount
        == 1
    )


def candidates(conn: sa.Connection, me: str) -> list[dict[str, Any]]:
    """Executors that may be gone: lease lapsed, or released; never taken over already, never me."""
    e = t.executors.c
    now = db_now(conn)
    rows = conn.execute(
        sa.select(e.executor_id, e.generation, e.released_epoch, (now - e.renewed_epoch).label("age"), e.lease_seconds).where(
            e.executor_id != me,
            e.taken_over_by.is_(None),
            sa.or_(e.released_epoch.is_not(None), e.renewed_epoch < now - e.lease_seconds),
        )
    ).mappings()
    return [dict(r) | {"why": "released" if r["released_epoch"] is not None else "lapsed"} for r in rows]


def claim(conn: sa.Connection, executor_id: str, generation: int, me: str, why: str) -> bool:
    """The one compare-and-set that makes exactly one live runtime the taker of a gone executor."""
    e = t.executors.c
    now = db_now(conn)
    condition = [e.executor_id == executor_id, e.generation == generation, e.taken_over_by.is_(None)]
    if why == "lapsed":  # re-checked inside the claim: a late renewal wins over a takeover
        condition.append(e.renewed_epoch < now - e.lease_seconds)
    won = conn.execute(t.executors.update().where(*condition).values(taken_over_by=me, taken_over_epoch=now)).rowcount == 1
    if won:
        conn.execute(
            t.executor_takeovers.insert().values(executor_id=executor_id, generation=generation, taken_by=me, taken_epoch=now, why=why)
        )
    return won


def record_taken(conn: sa.Connection, executor_id: str, generation: int, workflow_ids: list[str]) -> None:
    conn.execute(
        t.executors.update()
        .where(t.executors.c.executor_id == executor_id, t.executors.c.generation == generation)
        .values(taken_runs=len(workflow_ids))
    )
    conn.execute(
        t.executor_takeovers.update()
        .where(t.executor_takeovers.c.executor_id == executor_id, t.executor_takeovers.c.generation == generation)
        .values(workflow_ids=workflow_ids)
    )


def generation_of(conn: sa.Connection, executor_id: str) -> int | None:
    """The executor's current lease generation (None: never registered)."""
    row = conn.execute(sa.select(t.executors.c.generation).where(t.executors.c.executor_id == executor_id)).first()
    return None if row is None else int(row.generation)


def audit(conn: sa.Connection) -> list[dict[str, Any]]:
    """Every executor's row in the ``executor_audit`` view (lease status computed by the database)."""
    view = "executor_audit" if conn.dialect.name == "sqlite" else "helix.executor_audit"
    rows = [dict(r) for r in conn.execute(sa.text(f"SELECT * FROM {view} ORDER BY executor_id")).mappings()]
    for row in rows:  # raw SQL: its timestamps as the typed columns read them (aware UTC)
        for key in row:
            if key.endswith("_at"):
                row[key] = as_utc(row[key])
    return rows


def took_over(conn: sa.Connection) -> dict[str, list[str]]:
    """Taker executor id -> the executors whose runs it took over, oldest first."""
    took: dict[str, list[str]] = {}
    for h in conn.execute(sa.select(t.executor_takeovers).order_by(t.executor_takeovers.c.taken_epoch)).mappings():
        took.setdefault(h["taken_by"], []).append(h["executor_id"])
    return took
