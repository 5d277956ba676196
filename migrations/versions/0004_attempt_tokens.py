"""Attempt tokens, and attempts closed ``lost`` when their call is answered without them.

``attempts.token`` names the gate execution that opened an attempt: a gate retried after a lost
commit acknowledgement finds its own attempt by it instead of taking it for a crashed one.

A call answered without its body's result (recovery, failure, stop) now closes its open attempts
with ``outcome = 'lost'`` and an end time, so no attempt row stays open; ``call_audit.lost_attempts``
counts those as well as the open attempts a crash left behind (the view is rebuilt from 0002's SQL).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 12:00:00.000000
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_LOST = "WHERE a.dispatch_id = c.dispatch_id AND a.outcome IS NULL\n                    AND NOT (c.status = 'running' AND a.attempt = c.attempts)) AS lost_attempts"
_NEW_LOST = (
    "WHERE a.dispatch_id = c.dispatch_id AND (a.outcome = 'lost' OR (a.outcome IS NULL\n"
    "                    AND NOT (c.status = 'running' AND a.attempt = c.attempts)))) AS lost_attempts"
)


def _views_0002() -> ModuleType:
    path = Path(__file__).with_name("0002_audit_views.py")
    spec = importlib.util.spec_from_file_location("helix_migration_0002", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call_audit(new: bool) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    v = _views_0002()
    prefix = "helix." if postgres else ""
    body = v.view_sql(prefix, v._millis_pg if postgres else v._millis_sqlite)["call_audit"]
    assert _OLD_LOST in body, "0002's call_audit changed; update 0004's rewrite"
    op.execute(f"DROP VIEW IF EXISTS {prefix}call_audit")
    op.execute(f"CREATE VIEW {prefix}call_audit AS {body.replace(_OLD_LOST, _NEW_LOST) if new else body}")


def _schema() -> str | None:
    """``helix`` on Postgres; SQLite has no schemas (ALTER TABLE is not schema-translated)."""
    return "helix" if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("token", sa.String(length=32), nullable=True), schema=_schema())
    _call_audit(new=True)


def downgrade() -> None:
    _call_audit(new=False)
    op.drop_column("attempts", "token", schema=_schema())
