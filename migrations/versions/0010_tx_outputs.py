"""The run workflow's own exactly-once record: one row per ledger transaction a workflow committed.

A workflow's ledger transactions (prepare, append, step commit, stop, fail, the child and companion
gates) used to run as DBOS datasource transactions, which cost five database transactions each
(DBOS checks the workflow's status and its recorded output, takes ownership, writes, and records in
its system tables). The record now commits with the work in one transaction: ``(workflow_id, op)``
is unique, so a second execution of the same workflow (a recovery, a concurrent ``resume``) either
reads the output the first one committed or fails on the key and rolls its work back.

Events cost one statement each: on Postgres a writable CTE bumps the session's event counter and
inserts the event; SQLite has no writable CTEs, so the insert reads the counter and a trigger
(``events_bump_seq``) moves it, inside the same statement and under SQLite's one write lock.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 10:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tx_outputs",
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("op", sa.String(length=120), nullable=False),
        sa.Column("output", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("workflow_id", "op"),
        schema="helix",
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(_SQLITE_TRIGGER)


_SQLITE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS events_bump_seq AFTER INSERT ON events
BEGIN
    UPDATE sessions SET event_seq = NEW.seq WHERE session_id = NEW.session_id AND event_seq < NEW.seq;
END
"""


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_bump_seq")
    op.drop_table("tx_outputs", schema="helix")
