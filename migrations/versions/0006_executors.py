"""Executor leases and takeovers: who is alive, who took over whose runs.

Every launched runtime registers its executor id here and renews the lease while its executor lock
holds (``helix_dbos/runtime/leases.py``); a live runtime that finds another executor's lease lapsed
(or that executor shut down with runs still pending) claims it here, exactly once, and hands its
pending workflows to DBOS's recovery. ``executor_takeovers`` is the history; ``executor_audit`` the
operator's view. Times are epoch seconds read from the database's own clock, so hosts with skewed
clocks still agree on who lapsed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 08:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_VIEW = """
CREATE VIEW helix.executor_audit AS
SELECT executor_id, host, pid, generation, lease_seconds,
       to_timestamp(started_epoch) AS started_at, to_timestamp(renewed_epoch) AS renewed_at,
       to_timestamp(released_epoch) AS released_at, taken_over_by, to_timestamp(taken_over_epoch) AS taken_over_at,
       taken_runs,
       CASE WHEN taken_over_by IS NOT NULL THEN 'taken_over'
            WHEN released_epoch IS NOT NULL THEN 'released'
            WHEN renewed_epoch >= EXTRACT(EPOCH FROM now()) - lease_seconds THEN 'live'
            ELSE 'lapsed' END AS status
FROM helix.executors
"""

_SQLITE_VIEW = """
CREATE VIEW executor_audit AS
SELECT executor_id, host, pid, generation, lease_seconds,
       datetime(started_epoch, 'unixepoch') AS started_at, datetime(renewed_epoch, 'unixepoch') AS renewed_at,
       datetime(released_epoch, 'unixepoch') AS released_at, taken_over_by,
       datetime(taken_over_epoch, 'unixepoch') AS taken_over_at, taken_runs,
       CASE WHEN taken_over_by IS NOT NULL THEN 'taken_over'
            WHEN released_epoch IS NOT NULL THEN 'released'
            WHEN renewed_epoch >= (julianday('now') - 2440587.5) * 86400.0 - lease_seconds THEN 'live'
            ELSE 'lapsed' END AS status
FROM executors
"""


def upgrade() -> None:
    op.create_table(
        "executors",
        sa.Column("executor_id", sa.String(length=200), primary_key=True),
        sa.Column("host", sa.String(length=255)),
        sa.Column("pid", sa.Integer()),
        sa.Column("generation", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("lease_seconds", sa.Float(), nullable=False),
        sa.Column("started_epoch", sa.Float(), nullable=False),
        sa.Column("renewed_epoch", sa.Float(), nullable=False),
        sa.Column("released_epoch", sa.Float()),
        sa.Column("taken_over_by", sa.String(length=200)),
        sa.Column("taken_over_epoch", sa.Float()),
        sa.Column("taken_runs", sa.Integer()),
        schema="helix",
    )
    op.create_table(
        "executor_takeovers",
        sa.Column("executor_id", sa.String(length=200), primary_key=True),
        sa.Column("generation", sa.Integer(), primary_key=True),
        sa.Column("taken_by", sa.String(length=200), nullable=False),
        sa.Column("taken_epoch", sa.Float(), nullable=False),
        sa.Column("why", sa.String(length=16), nullable=False),  # lapsed | released
        sa.Column("workflow_ids", sa.JSON()),
        schema="helix",
    )
    op.execute(_SQLITE_VIEW if op.get_bind().dialect.name == "sqlite" else _PG_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS executor_audit" if op.get_bind().dialect.name == "sqlite" else "DROP VIEW IF EXISTS helix.executor_audit")
    op.drop_table("executor_takeovers", schema="helix")
    op.drop_table("executors", schema="helix")
