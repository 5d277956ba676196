"""Transactional tools and reconcile checks: how a call's outcome was proved, on its row and in call_audit.

Adds to ``calls``: ``transactional`` (every body so far wrote inside the transaction that records its
result), ``decided_by`` (``database`` or ``check`` when recovery, not the body, proved the outcome)
and ``check_outcome`` (the reconcile check's last answer as JSON). ``call_audit`` is recreated with
the three columns: its body is 0008's (0002's with 0004's rewrite and 0008's owner, all taken from
those files, so the views never drift apart), plus the new columns.

Plain ``ADD COLUMN`` on both databases (no table rebuild), so SQLite's views need no special care
beyond the one being replaced.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 13:00:00.000000
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ANCHOR = "c.child_session_id,"
_ADDED = "c.child_session_id,\n                c.transactional,\n                c.decided_by,\n                c.check_outcome,"


def _migration(filename: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call_audit(postgres: bool, extended: bool) -> str:
    views = _migration("0002_audit_views.py", "helix_migration_0002")
    owners = _migration("0008_session_owner.py", "helix_migration_0008")
    body = owners.view_sql("helix." if postgres else "", views._millis_pg if postgres else views._millis_sqlite)["call_audit"]
    assert body.count(_ANCHOR) == 1, "call_audit changed shape; update 0009's rewrite"
    return body.replace(_ANCHOR, _ADDED) if extended else body


def _replace_view(extended: bool) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    name = f"{'helix.' if postgres else ''}call_audit"
    op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute(f"CREATE VIEW {name} AS {_call_audit(postgres, extended)}")


def _schema() -> str | None:
    """``ALTER TABLE`` is not schema-translated on SQLite (no schemas there): name none."""
    return "helix" if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    json = sa.JSON().with_variant(JSONB(), "postgresql")
    schema = _schema()
    op.add_column("calls", sa.Column("transactional", sa.Boolean(), nullable=False, server_default=sa.false()), schema=schema)
    op.add_column("calls", sa.Column("decided_by", sa.String(length=16), nullable=True), schema=schema)
    op.add_column("calls", sa.Column("check_outcome", json, nullable=True), schema=schema)
    _replace_view(extended=True)


def downgrade() -> None:
    _replace_view(extended=False)
    for column in ("check_outcome", "decided_by", "transactional"):
        op.drop_column("calls", column, schema=_schema())
