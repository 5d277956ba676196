"""Operator tasks on the database itself: migrating the ledger and the read-only audit role."""

from __future__ import annotations

import re

import sqlalchemy as sa

from ..errors import ValidationError
from ..ledger.engine import create_sync_engine, ensure_sqlite_wal, is_sqlite
from ..ledger.migrate import upgrade
from ..ledger.tables import SCHEMA
from .common import CLI_APPLICATION_NAME

ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def migrate(url: str) -> str | None:
    """Bring the ledger to head; returns the revision now applied."""
    if is_sqlite(url):
        ensure_sqlite_wal(url)
    upgrade(url)
    return revision(url)


def revision(url: str) -> str | None:
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool, application_name=CLI_APPLICATION_NAME)
    table = "helix_alembic_version" if is_sqlite(url) else f"{SCHEMA}.alembic_version"
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(f"SELECT version_num FROM {table}")).scalar()
    finally:
        engine.dispose()


def check_role_name(name: str) -> None:
    if not ROLE_NAME.match(name):
        raise ValidationError(f"role name {name!r}: use lowercase letters, digits and '_' (at most 63, not starting with a digit)")


def audit_role_sql(name: str, password: str | None, database: str, schemas: list[str], exists: bool) -> list[str]:
    """The statements that make ``name`` a login role that can read, and only read, the ledger."""
    check_role_name(name)
    quote = "'" + (password or "").replace("'", "''") + "'"
    login = f"LOGIN PASSWORD {quote}" if password else "LOGIN"
    statements = [
        f"{'ALTER' if exists else 'CREATE'} ROLE {name} {login}",
        f'GRANT CONNECT ON DATABASE "{database.replace(chr(34), chr(34) * 2)}" TO {name}',
        # Belt and braces: even a GRANT added later by mistake cannot make its sessions write.
        f"ALTER ROLE {name} SET default_transaction_read_only = on",
    ]
    for schema in schemas:
        statements += [
            f"GRANT USAGE ON SCHEMA {schema} TO {name}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {name}",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {name}",
        ]
    return statements


def create_audit_role(url: str, name: str, password: str | None) -> list[str]:
    """Create (or update) the read-only role on Postgres: SELECT on schema helix, and dbos if present."""
    if is_sqlite(url):
        raise ValidationError(
            "read-only roles are a Postgres feature; on SQLite give auditors a read-only open instead: "
            "sqlite3 'file:helix_dbos.sqlite?mode=ro'"
        )
    check_role_name(name)
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool, application_name=CLI_APPLICATION_NAME)
    try:
        with engine.begin() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}).first() is not None
            database = str(conn.execute(sa.text("SELECT current_database()")).scalar())
            present = set(conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname IN ('helix', 'dbos')")).scalars())
            statements = audit_role_sql(name, password, database, [s for s in (SCHEMA, "dbos") if s in present], exists)
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()
    quoted = "'" + (password or "").replace("'", "''") + "'"
    return [s.replace(quoted, "'***'") if password else s for s in statements]
