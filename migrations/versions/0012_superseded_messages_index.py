"""An index of a session's superseded messages: what each model request counts.

Every model request reads how many of its session's messages a rewind superseded (the transcript
cache's check that nothing before its last message changed, ``model_step._read``). Through the
primary key ``(session_id, seq)`` that count visits every message of the session, so a request at
step 200 paid for 600 rows a request at step 10 did not. A partial index of the superseded rows
alone makes it proportional to what was rewound (nothing, in most sessions), on both databases.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 21:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUPERSEDED = sa.text("superseded_by IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_messages_superseded", "messages", ["session_id"], schema="helix", postgresql_where=_SUPERSEDED, sqlite_where=_SUPERSEDED)


def downgrade() -> None:
    op.drop_index("ix_messages_superseded", table_name="messages", schema="helix")
