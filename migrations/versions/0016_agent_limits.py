"""The agents' limits as the fleet agreed on them, per application version.

A front end and its workers each declare an agent's ``max_running`` (and model request rate) in
their own code, and the queue a run waits on follows from it: a front end with a limit its workers
lack enqueued on a queue no worker served (the run stayed ``queued`` for ever, nothing logged), and
the other way round the limit was bypassed. The first process of an application version to define
an agent records its limits here; every later launch of that version compares its own and is
refused ``limits_mismatch`` when they differ (``ledger/agent_limits.py``, docs/scaling.md).

Revision ID: 0016
Revises: 0014 (rechained after 0015 at merge)
Create Date: 2026-12-06 13:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_limits",
        sa.Column("application_version", sa.String(length=200), primary_key=True),
        sa.Column("agent_name", sa.String(length=200), primary_key=True),
        sa.Column("max_running", sa.Integer()),
        sa.Column("model_requests", sa.Integer()),
        sa.Column("model_requests_period", sa.Float()),
        sa.Column("recorded_by", sa.String(length=200), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        schema="helix",
    )


def downgrade() -> None:
    op.drop_table("agent_limits", schema="helix")
