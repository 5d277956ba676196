"""Call updates become HOT on Postgres: ``ix_calls_status`` goes, ``calls`` keeps room on its pages.

A call's row is updated twice in the common case (the gate: ``running``; the result: ``ok``), and
each change of ``status`` rewrote every index entry of the row (five indexes), because Postgres
can only update a row in place on its page (HOT) when no indexed column changes and the page has
room. Nothing in the runtime looks calls up by status alone: every such read also names the call,
its run or its session, which are indexed. The index served only an operator's cross-session
``helix-dbos calls --status X``, which now scans the table (an occasional read, against two index
rewrites on every call). ``fillfactor=80`` leaves a fifth of each page free for the updated row
versions. Measured with ``python -m bench.walcount`` (docs/scaling.md).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 10:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_calls_status", table_name="calls", schema="helix")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE helix.calls SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE helix.calls RESET (fillfactor)")
    op.create_index("ix_calls_status", "calls", ["status"], unique=False, schema="helix")
