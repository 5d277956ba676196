"""Session owners: the authenticated principal that started each session, shown in the audit views.

The service stamps ``sessions.owner`` in the transaction that creates the session (a child or
companion session inherits its parent's), and filters every read and entry by it. Sessions created
before this revision, or by a service running without authentication, have no owner: only the
``operator`` and ``approver`` roles see them once authentication is on.

The audit views are rebuilt with ``owner`` (in ``call_audit`` and ``run_audit``) beside
``approval_actor``, the approver's name, which the HTTP service now takes from the authenticated
principal instead of the request body (docs/service.md, "Deploying"). They are built from 0002's
SQL with 0004's ``lost_attempts`` rewrite applied, then the owner added; downgrade puts back exactly
what 0004 left.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 12:00:00.000000
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _migration(filename: str, name: str) -> ModuleType:
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _audit_0002() -> ModuleType:
    """0002's module: its duration helpers and its view bodies."""
    return _migration("0002_audit_views.py", "helix_migration_0002")


def views_0004(s: str, ms: Callable[[str, str], str]) -> dict[str, str]:
    """The views as 0004 left them: 0002's, with call_audit's ``lost_attempts`` rewritten."""
    m4 = _migration("0004_attempt_tokens.py", "helix_migration_0004")
    views = dict(_audit_0002().view_sql(s, ms))
    assert m4._OLD_LOST in views["call_audit"], "0002's call_audit changed; update 0007"
    views["call_audit"] = views["call_audit"].replace(m4._OLD_LOST, m4._NEW_LOST)
    return views


def view_sql(s: str, ms: Callable[[str, str], str]) -> dict[str, str]:
    """0004's views plus ``owner``: call_audit and run_audit gain the session's owner."""
    views = views_0004(s, ms)
    views["call_audit"] = views["call_audit"].replace("s.agent_name,", "s.agent_name,\n                s.owner,", 1)
    views["run_audit"] = views["run_audit"].replace(
        "r.session_id,", "r.session_id,\n                (SELECT o.owner FROM {s}sessions o WHERE o.session_id = r.session_id) AS owner,".format(s=s), 1
    )
    return views


def _schema() -> tuple[bool, str]:
    postgres = op.get_bind().dialect.name == "postgresql"
    return postgres, "helix." if postgres else ""


def _drop_views(prefix: str) -> None:
    for name in _audit_0002().VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {prefix}{name}")


def _create_views(views: dict[str, str], prefix: str) -> None:
    for name, body in views.items():
        op.execute(f"CREATE VIEW {prefix}{name} AS {body}")


def upgrade() -> None:
    postgres, prefix = _schema()
    audit = _audit_0002()
    schema = "helix" if postgres else None  # ALTER TABLE is not schema-translated on SQLite
    _drop_views(prefix)
    op.add_column("sessions", sa.Column("owner", sa.String(length=200), nullable=True), schema=schema)
    op.create_index("ix_sessions_owner", "sessions", ["owner"], schema=schema)
    _create_views(view_sql(prefix, audit._millis_pg if postgres else audit._millis_sqlite), prefix)


def downgrade() -> None:
    postgres, prefix = _schema()
    audit = _audit_0002()
    schema = "helix" if postgres else None
    _drop_views(prefix)
    op.drop_index("ix_sessions_owner", table_name="sessions", schema=schema)
    with op.batch_alter_table("sessions", schema=schema) as batch:
        batch.drop_column("owner")
    _create_views(views_0004(prefix, audit._millis_pg if postgres else audit._millis_sqlite), prefix)
