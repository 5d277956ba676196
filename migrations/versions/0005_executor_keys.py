"""Private executor-lock keys: the advisory-lock key of each executor id, readable by the runtime only.

The key was a hash of database name + executor id, so any role that could connect (the read-only
audit role included) could take an executor's lock and block its start and recovery. The key now
lives in schema ``helix_private``, which ``helix-dbos audit-role`` never grants, with the generation
that fences a cut-off holder out of re-acquiring after someone else took over (see
``helix_dbos/runtime/executor_lock.py``). Postgres only: on SQLite the lock is a file lock.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 07:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute("CREATE SCHEMA IF NOT EXISTS helix_private")
    op.execute("REVOKE ALL ON SCHEMA helix_private FROM PUBLIC")
    op.execute(
        "CREATE TABLE helix_private.executor_locks ("
        " executor_id varchar(200) PRIMARY KEY,"
        " lock_key bigint NOT NULL,"
        " generation bigint NOT NULL DEFAULT 0,"
        " confirmed_at timestamptz,"
        " host varchar(255),"  # where the holder runs: a relaunch on the same host sees if it is gone
        " pid integer,"
        " lease_seconds double precision)"  # the holder's lease: a newcomer waits it out
    )
    op.execute("REVOKE ALL ON helix_private.executor_locks FROM PUBLIC")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute("DROP TABLE IF EXISTS helix_private.executor_locks")
    op.execute("DROP SCHEMA IF EXISTS helix_private")
