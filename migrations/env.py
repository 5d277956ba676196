"""Alembic environment for the helix ledger.

Run by ``runtime.launch()``, by ``helix-dbos migrate`` and so by ``dbos migrate`` (through
``database.migrate`` in dbos-config.yaml). The URL comes from the Alembic config's
``sqlalchemy.url`` (set programmatically) or ``HELIX_DBOS_DATABASE_URL``. Concurrent launchers are
serialized: a Postgres advisory lock taken before anything else (the schema's creation included),
or on SQLite a file lock beside the database (``ledger/migrate.py``).
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.ledger.tables import SCHEMA, metadata

_LOCK_ID = 0x48454C4958  # "HELIX"

config = context.config
url = config.get_main_option("sqlalchemy.url") or os.environ.get("HELIX_DBOS_DATABASE_URL")
if not url:
    raise RuntimeError("no database URL: set sqlalchemy.url or HELIX_DBOS_DATABASE_URL")


def run_migrations_online() -> None:
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool)
    sqlite = is_sqlite(url)
    with engine.connect() as conn:
        if not sqlite:
            # The lock first: two sessions' CREATE SCHEMA IF NOT EXISTS race on an empty database
            # (both see no schema, the second fails on pg_namespace's unique index), so only the
            # lock's holder creates it, as it runs every other statement of the migration.
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_ID})
            conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
            conn.commit()
        try:
            context.configure(
                connection=conn,
                target_metadata=metadata,
                version_table="helix_alembic_version" if sqlite else "alembic_version",
                version_table_schema=None if sqlite else SCHEMA,
                include_schemas=not sqlite,
                render_as_batch=sqlite,
                include_name=lambda name, type_, parent: type_ != "schema" or name == SCHEMA,
            )
            with context.begin_transaction():
                context.run_migrations()
            conn.commit()
        finally:
            if not sqlite:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_ID})
                conn.commit()
    engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
