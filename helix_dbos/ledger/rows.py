"""What every query module shares: rows handed back as plain dicts, and the clock and ids rows are stamped with.

The typed readers of each table cast these dicts to their ``records`` type. Nothing here commits:
every function takes a blocking ``sa.Connection`` inside the caller's transaction.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa


def now() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


def fetch_one(conn: sa.Connection, stmt: sa.Executable, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """One row as a plain dict (the typed readers cast it to their table's ``records`` type)."""
    row = conn.execute(stmt, params).mappings().first()
    return dict(row) if row is not None else None


def fetch_all(conn: sa.Connection, stmt: sa.Executable, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(stmt, params).mappings()]


# Statements of the write path are built once, with bound parameters, and executed with a dict:
# building a Core statement and its cache key costs more Python than running it on SQLite, and a
# run executes these a few dozen times. Values of an INSERT or an UPDATE's SET come from the dict's
# keys (SQLAlchemy types them by column); WHERE parameters are named ``w_*`` (a bind may not share
# a column's name in a statement that writes that column).


@functools.cache
def by_key(table: sa.Table, key: str, for_update: bool) -> sa.Select[Any]:
    """``table``'s row whose ``key`` is the bound ``w_key`` (locked with ``for_update``)."""
    stmt = sa.select(table).where(table.c[key] == sa.bindparam("w_key"))
    return stmt.with_for_update() if for_update else stmt


@functools.cache
def insert_if_absent(dialect: str, table: sa.Table) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` in ``dialect`` (Postgres and SQLite both have it), built
    once per table: executed with a dict of values like the write path's other statements."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


def insert_rows(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Several rows of ``table``, every row with the same keys, in one statement on Postgres.

    SQLAlchemy never caches a multi-row ``VALUES`` insert (its cache key is None whatever the
    values), so each one was compiled again, and psycopg parses any query of more than 50 parameters
    again too: a step's three calls cost more client CPU to build than the server spent running
    them. ``INSERT ... SELECT FROM unnest(...)`` binds one array per column instead, so the
    statement is compiled once per table and key set and its text stays short. SQLite (and one
    row anywhere): the plain insert, executemany for several."""
    if not rows:
        return
    if any(r.keys() != rows[0].keys() for r in rows):  # a column one row names and another does not would be dropped silently
        raise ValueError(f"{table.name}: every row of one insert names the same columns")
    if conn.dialect.name != "postgresql" or len(rows) == 1:
        conn.execute(table.insert(), rows)
        return
    keys = tuple(rows[0])
    conn.execute(_unnest_insert(table, keys), {f"u_{k}": [r[k] for r in rows] for k in keys})


@functools.cache
def _unnest_insert(table: sa.Table, keys: tuple[str, ...]) -> sa.Insert:
    from sqlalchemy.dialects.postgresql import ARRAY

    listed = sa.func.unnest(
        *(sa.bindparam(f"u_{k}", type_=ARRAY(table.c[k].type)) for k in keys)
    ).table_valued(*keys).render_derived(name="listed")
    return table.insert().from_select(list(keys), sa.select(*(listed.c[k] for k in keys)))
