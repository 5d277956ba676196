"""Persistent companions: one row per (parent session, companion agent), naming its live workflow.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "companions",
        sa.Column("companion_session_id", sa.String(length=64), nullable=False),
        sa.Column("parent_session_id", sa.String(length=64), nullable=False),
        sa.Column("agent_name", sa.String(length=200), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("incarnation", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(length=140), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("first_dispatch_id", sa.String(length=64), nullable=False),
        sa.Column("last_dispatch_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["companion_session_id"], ["helix.sessions.session_id"]),
        sa.ForeignKeyConstraint(["parent_session_id"], ["helix.sessions.session_id"]),
        sa.PrimaryKeyConstraint("companion_session_id"),
        sa.UniqueConstraint("parent_session_id", "agent_name", name="uq_companions_parent_agent"),
        schema="helix",
    )


def downgrade() -> None:
    op.drop_table("companions", schema="helix")
