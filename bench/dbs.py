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
