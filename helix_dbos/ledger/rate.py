"""A rate of model requests that holds across every process on one database: a sliding window log.

DBOS's queue rate limiter counts workflow starts, and a run makes many model requests, so the
window is the ledger's own (``rate_grants``, migration 0013). One transaction per request of a
rate-limited agent: the key's lock (a transaction-scoped Postgres advisory lock; on SQLite the
file's write lock, which every ledger transaction takes up front), the grants of the last
``period`` seconds counted on the database's clock, and one inserted if fewer than ``limit``.
Counting every grant in any window of ``period`` is what keeps the rate in any window, not just in
fixed buckets (a fixed bucket lets twice the limit through across its edge).
"""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa

from . import tables as t


class Grant(NamedTuple):
    """A request granted at ``epoch`` (database clock), or refused: ``epoch`` None, ``wait`` seconds."""

    epoch: float | None
    wait: float

#: Grants are kept this long past their window (then pruned), so an operator (and a test) can read
#: the recent rate back from the table.
RETAIN_SECONDS = 60.0
#: The advisory lock's class (the two-int form, so it never meets the executor lock's bigint keys).
_LOCK_CLASS = 0x48524C  # "HRL"


def _db_epoch(conn: sa.Connection) -> float:
    if conn.dialect.name == "sqlite":
        return float(conn.execute(sa.text("SELECT (julianday('now') - 2440587.5) * 86400.0")).scalar_one())
    return float(conn.execute(sa.text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar_one())


def try_grant(conn: sa.Connection, key: str, limit: int, period: float, run_id: str | None = None) -> Grant:
    """Grant one request under ``key`` now, or say how many seconds until one may be.

    Call inside a transaction: the lock it takes is released when that transaction ends.
    """
    if conn.dialect.name != "sqlite":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:c, hashtext(:k))"), {"c": _LOCK_CLASS, "k": key})
    now = _db_epoch(conn)
    since = now - period
    # Grants long out of the window are never counted again: drop them (a bounded table).
    conn.execute(t.rate_grants.delete().where(t.rate_grants.c.rate_key == key, t.rate_grants.c.granted_epoch <= since - RETAIN_SECONDS))
    window = conn.execute(
        sa.select(sa.func.count(), sa.func.min(t.rate_grants.c.granted_epoch)).where(
            t.rate_grants.c.rate_key == key, t.rate_grants.c.granted_epoch > since
        )
    ).one()
    if int(window[0]) < limit:
        conn.execute(t.rate_grants.insert().values(rate_key=key, granted_epoch=now, run_id=run_id))
        return Grant(now, 0.0)
    # The oldest grant leaves the window at oldest + period; a little past it, to land after it.
    return Grant(None, max(0.001, float(window[1]) + period - now + 0.001))
