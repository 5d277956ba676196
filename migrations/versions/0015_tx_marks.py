"""``tx_marks``: a transactional body's marker, written inside its own transaction before it runs.

A transactional call's attempt row is committed apart, before the body, and carries no effect; the
body's writes commit with its result. A body that commits the transaction itself (through the
driver's connection, which Python code can always reach) used to commit its effect with nothing to
tell recovery, which then ran it again. The marker is the first row the body's transaction writes:
any commit the body forces carries it with the effect, and the result write deletes it in the same
transaction. So a marker that is committed and has no result beside it proves the body escaped its
transaction: recovery answers that call ``outcome_unknown`` and never runs it again. No foreign key:
the marker's insert must take no lock on the call's row (a stop answers a running call meanwhile).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 13:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tx_marks",
        sa.Column("dispatch_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("marked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("dispatch_id", "attempt"),
        schema="helix",
    )


def downgrade() -> None:
    op.drop_table("tx_marks", schema="helix")
