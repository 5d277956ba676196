"""On SQLite, a call's attempt row marks the call running in the same statement (a trigger).

A body start is one fact written to two rows: the attempt (its number, run, executor, time) and
the call's status, attempt count and first start. Postgres writes both, and the ``tool_start``
event, in one statement of writable CTEs (``ledger/attempts.py``); SQLite has none, so its attempt
gate paid a statement for each. ``attempts_mark_call`` moves the call's half into the attempt's
INSERT, under SQLite's one write lock, as ``events_bump_seq`` (0010) does for the event counter:
the call becomes ``running`` with ``attempts`` = the new attempt's number, and keeps the
``started_at`` of its first body.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 21:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS attempts_mark_call AFTER INSERT ON attempts
BEGIN
    UPDATE calls SET status = 'running', attempts = NEW.attempt, started_at = coalesce(started_at, NEW.started_at)
    WHERE dispatch_id = NEW.dispatch_id;
END
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS attempts_mark_call")
