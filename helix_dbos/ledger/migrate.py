"""Bring the ledger's tables to the newest revision (idempotent, safe to call from every launch)."""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config


def migrations_dir() -> Path:
    """The Alembic scripts: top-level ``migrations/`` in a checkout, ``_migrations`` in a wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("helix_dbos migrations not found (expected migrations/env.py)")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation would choke on '%' in passwords.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@functools.cache
def _heads(scripts: Path) -> frozenset[str]:
    """The scripts' head revisions, parsed once per process: reading the revision files is most of
    an at-head launch's cost (about 0.3 s), and they do not change under a running process."""
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(scripts))
    return frozenset(ScriptDirectory.from_config(cfg).get_heads())


def _at_head(url: str) -> bool:
    """Whether the ledger is already at head: then a launch runs no migration at all. On Postgres it
    also takes no migration lock, so a role that squats that (computable) advisory lock, the
    read-only audit role say, cannot hang it; on SQLite it skips Alembic's environment (most of a
    relaunch's start-up). A file with no version table is not at head (it may not exist yet: the
    read creates nothing, since SQLite creates the file on the first write, not on connect)."""
    import sqlalchemy as sa
    from alembic.runtime.migration import MigrationContext

    from .engine import create_sync_engine, is_sqlite, sqlite_path
    from .tables import SCHEMA

    sqlite = is_sqlite(url)
    if sqlite:
        path = sqlite_path(url)
        if not path or not os.path.exists(path):
            return False  # an in-memory or a new file: nothing to read, and connecting would create it
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            opts = {"version_table": "helix_alembic_version", "version_table_schema": None} if sqlite else {
                "version_table": "alembic_version", "version_table_schema": SCHEMA}
            return set(MigrationContext.configure(conn, opts=opts).get_current_heads()) == _heads(migrations_dir())
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    if revision == "head" and _at_head(url):
        return
    with _sqlite_migration_lock(url):
        command.upgrade(alembic_config(url), revision)


@contextmanager
def _sqlite_migration_lock(url: str) -> Iterator[None]:
    """Serialize concurrent first launches on one SQLite file. Its single writer does not: Python's
    sqlite3 opens no transaction for the version read or for DDL, so two launchers both found no
    tables and the second failed with "table ... already exists". A file lock beside the database
    does (Postgres migrations serialize on an advisory lock in migrations/env.py)."""
    from .engine import is_sqlite, sqlite_path

    path = sqlite_path(url) if is_sqlite(url) else None
    if not path:
        yield
        return
    fd = os.open(f"{path}.migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
