"""Runs that wait on a queue, and model requests counted across processes.

A run admitted by an enqueue-only front end (or for an agent with a limit) is ``queued`` until a
worker dequeues it; ``runs.started_at`` says when a worker turned it ``running`` (for a run started
in the admitting process it is its ``created_at``), so how many runs of an agent were in flight at
any moment is read from the ledger alone. ``rate_grants`` is the sliding window of an agent's model
requests (docs/scaling.md): one row per request granted, on the database's clock, so every worker
counts the same window.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 04:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _alter_schema() -> str | None:
    """ALTER TABLE is not schema-translated on SQLite (as in 0008)."""
    return None if op.get_bind().dialect.name == "sqlite" else "helix"


def upgrade() -> None:
    op.add_column("runs", sa.Column("started_at", sa.DateTime(timezone=True)), schema=_alter_schema())
    op.create_table(
        "rate_grants",
        sa.Column("grant_id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rate_key", sa.String(length=200), nullable=False),
        sa.Column("granted_epoch", sa.Float(), nullable=False),
        sa.Column("run_id", sa.String(length=64)),
        schema="helix",
    )
    op.create_index("ix_rate_grants_key_epoch", "rate_grants", ["rate_key", "granted_epoch"], schema="helix")


def downgrade() -> None:
    op.drop_index("ix_rate_grants_key_epoch", table_name="rate_grants", schema="helix")
    op.drop_table("rate_grants", schema="helix")
    op.drop_column("runs", "started_at", schema=_alter_schema())
