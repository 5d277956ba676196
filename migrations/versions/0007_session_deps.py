"""Deps input per session: the JSON a run stores at start, from which a deps factory rebuilds deps.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 07:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_deps",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("data", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["helix.sessions.session_id"]),
        sa.PrimaryKeyConstraint("session_id"),
        schema="helix",
    )


def downgrade() -> None:
    op.drop_table("session_deps", schema="helix")
