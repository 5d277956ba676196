"""Fresh benchmark databases, and the size of what they hold.

Why fresh: `configure_dbos(reset=True)` empties DBOS's tables but not the helix ledger, and a
ledger left by an earlier bench run changes both timings (index depth) and storage figures. Every
section therefore starts from a new Postgres database or a new SQLite file.
"""

from __future__ import annotations

import glob
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

APP_NAME = "helix-bench"
APP_VERSION = "helix-bench-1"
"""Pinned: the default version is an MD5 of all workflow source, which would change with every edit."""

DEFAULT_PG_BASE = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
"""Where bench databases are created (`--pg-url`); each section gets its own `helix_bench_<name>`."""


def _admin(pg_base: str) -> sa.Engine:
    url = sa.make_url(pg_base).set(drivername="postgresql+psycopg", database="postgres")
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def fresh_postgres(pg_base: str, name: str) -> str:
    """Drop and create database `name` on the server of `pg_base`; return its URL (psycopg 3)."""
    admin = _admin(pg_base)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return sa.make_url(pg_base).set(drivername="postgresql+psycopg", database=name).render_as_string(hide_password=False)


def drop_postgres(pg_base: str, name: str) -> None:
    admin = _admin(pg_base)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def fresh_sqlite(directory: str, name: str) -> str:
    """A new SQLite file in WAL mode (plus no leftover -wal/-shm or executor locks); return its URL."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(os.path.abspath(directory), f"{name}.sqlite")
    for leftover in glob.glob(path + "*"):
        if os.path.isdir(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            os.remove(leftover)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()
    return f"sqlite:///{path}"


@contextmanager
def fresh_database(kind: str, name: str, *, pg_base: str, sqlite_dir: str, keep: bool = False) -> Iterator[str]:
    """A fresh database for one section, dropped afterwards unless `keep`."""
    if kind == "sqlite":
        url = fresh_sqlite(sqlite_dir, name)
        yield url
        if not keep:
            for leftover in glob.glob(url[len("sqlite:///"):] + "*"):
                shutil.rmtree(leftover, ignore_errors=True) if os.path.isdir(leftover) else os.remove(leftover)
        return
    url = fresh_postgres(pg_base, name)
    try:
        yield url
    finally:
        if not keep:
            drop_postgres(pg_base, name)


def default_sqlite_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "helix_bench")


# --- sizes ------------------------------------------------------------------------------------------


def postgres_sizes(url: str, schemas: tuple[str, ...] = ("helix", "dbos")) -> dict[str, dict[str, int]]:
    """Per schema: `disk` = sum of pg_total_relation_size (heap + indexes + TOAST, what the server
    stores, page-granular) and `live` = sum of pg_column_size of live rows (what the rows hold)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    out: dict[str, dict[str, int]] = {}
    try:
        with engine.connect() as conn:
            for schema in schemas:
                tables = [
                    r[0]
                    for r in conn.execute(
                        sa.text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY tablename"), {"s": schema}
                    )
                ]
                disk = live = 0
                per_table: dict[str, int] = {}
                for table in tables:
                    q = f'"{schema}"."{table}"'
                    d = int(conn.execute(sa.text(f"SELECT pg_total_relation_size('{q}')")).scalar() or 0)
                    l_ = int(conn.execute(sa.text(f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {q} t")).scalar() or 0)
                    disk += d
                    live += l_
                    per_table[table] = l_
                out[schema] = {"disk": disk, "live": live, **{f"live:{k}": v for k, v in per_table.items()}}
    finally:
        engine.dispose()
    return out


def helix_tables() -> set[str]:
    """The ledger's table names (unqualified on SQLite), read from its metadata so new tables count."""
    from helix_dbos.ledger.tables import metadata

    return {t.name for t in metadata.tables.values()} | {"helix_alembic_version"}


def sqlite_sizes(url: str) -> dict[str, dict[str, int]]:
    """`disk` = file size after a TRUNCATE checkpoint (the WAL folded in); per table group `live` =
    payload bytes from the `dbstat` virtual table when this SQLite has it (else -1)."""
    path = url[len("sqlite:///"):]
    con = sqlite3.connect(path, timeout=30)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        file_size = os.path.getsize(path)
        groups: dict[str, dict[str, int]] = {"helix": {"live": 0}, "dbos": {"live": 0}}
        try:
            rows = con.execute("SELECT name, sum(payload), sum(pgsize) FROM dbstat GROUP BY name").fetchall()
        except sqlite3.OperationalError:
            rows = []
            groups = {"helix": {"live": -1}, "dbos": {"live": -1}}
        owners = dict(con.execute("SELECT name, tbl_name FROM sqlite_master"))
        ledger = helix_tables()
        for name, payload, pgsize in rows:
            table = owners.get(name, name)
            group = "helix" if table in ledger else "dbos"
            groups[group]["live"] += int(payload or 0)
            groups[group]["disk"] = groups[group].get("disk", 0) + int(pgsize or 0)
            groups[group][f"live:{table}"] = groups[group].get(f"live:{table}", 0) + int(payload or 0)
        groups["file"] = {"disk": file_size, "live": 0}
    finally:
        con.close()
    return groups


def database_sizes(url: str) -> dict[str, dict[str, int]]:
    return sqlite_sizes(url) if url.startswith("sqlite") else postgres_sizes(url)


# --- DBOS on a bench database (the baselines' systems; helix's runtime configures its own) ---


def configure_dbos(
    url: str,
    *,
    launch: bool = True,
    reset: bool = True,
    log_level: str = "WARNING",
    executor_id: str | None = None,
    sys_db_pool_size: int | None = None,
) -> DBOSConfig:
    """(Re)configure the process-global DBOS against `url` and return the config used.

    * Any previous DBOS is destroyed *with its registry*: a DBOS instance cannot be re-configured in place,
      and a registry left behind would still point its wrappers at the destroyed instance.
      Consequence: build workflows/steps/agents after this call (use `launch=False`, build, `DBOS.launch()`).
    * Postgres (`postgresql[+psycopg]://...`): the database is created if missing.
    * SQLite (`sqlite:///path`): the file is created in WAL mode first (DBOS leaves the default rollback
      journal, which stalls the notification poller), and the poll interval is lowered to 10 ms.
    * `reset`: empty the system tables (`DBOS.reset_system_database(truncate=True)`, keeps the migrated
      schema) so each benchmark database starts clean. Must happen before launch (DBOS asserts).
    * `executor_id`: set it whenever helix_dbos shares this DBOS. `Runtime.launch()` takes the executor
      id from the existing config, so DBOS and the ledger's attempt rows then name the same executor
      (left unset, DBOS says "local" and the runtime locks a host default of its own). Two processes
      sharing a database (the two-worker bench) must each pass a different one.
    """
    DBOS.destroy(destroy_registry=True)
    config: DBOSConfig = {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "system_database_url": url,
        "log_level": log_level,
    }
    if executor_id is not None:
        config["executor_id"] = executor_id
    if sys_db_pool_size is not None:  # the concurrency bench shares a server: see bench/pools.py
        config["sys_db_pool_size"] = sys_db_pool_size
    if url.startswith("sqlite"):
        created = _ensure_sqlite_wal(url)
        config["notification_listener_polling_interval_sec"] = 0.01
    else:
        created = _ensure_pg_database(url)
    DBOS(config=config)
    if reset and not created:  # a brand-new database has nothing to empty (and no tables yet)
        DBOS.reset_system_database(truncate=True)
    if launch:
        DBOS.launch()
    return config


def _ensure_sqlite_wal(url: str) -> bool:
    """Create the SQLite file (and its directory) in WAL mode; returns True if the file is new.

    `journal_mode=WAL` persists in the file, so an existing non-WAL file is converted too.
    """
    path = sa.make_url(url).database
    if not path or path == ":memory:":
        raise ValueError(f"need a file-backed SQLite URL, got {url!r}")
    created = not os.path.exists(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    finally:
        conn.close()
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not put {path} in WAL mode (got {mode!r})")
    return created


def _ensure_pg_database(url: str) -> bool:
    """CREATE DATABASE if missing; returns True if it was created.

    DBOS would create it at launch too, but the truncate-reset runs before launch and needs it to exist.
    """
    parsed = sa.make_url(url)
    name = parsed.database
    if not name:
        raise ValueError(f"no database name in {url!r}")
    admin = sa.create_engine(
        parsed.set(drivername="postgresql+psycopg", database="postgres"), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
            if exists:
                return False
            quoted = admin.dialect.identifier_preparer.quote(name)
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
            return True
    finally:
        admin.dispose()
