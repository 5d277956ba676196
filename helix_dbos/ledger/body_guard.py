"""What a transactional body may do with the call's transaction: read and write its own tables, nothing else.

A transactional tool's exactly-once rests on one fact: the body's writes and the call's result commit
in one database transaction, or neither does. A body that could commit that transaction itself (or
roll it back, or begin another) would commit its effect apart from its result, and a crash after that
would run it again on a relaunch; a body that could write the ledger's own tables could rewrite what
recovery relies on. So the body never holds the SQLAlchemy ``Connection``: it gets a
``ToolConnection``, which offers ``execute``, ``scalar``, ``scalars`` and ``exec_driver_sql`` and
nothing that ends, begins or leaves the transaction, and every statement it sends is checked before
it reaches the database:

- SQLite: an authorizer on the connection for the body's duration (``sqlite3``'s
  ``set_authorizer``: SQLite itself asks it about every table a statement would write, triggers and
  views included) refuses ``BEGIN``/``COMMIT``/``ROLLBACK``/``SAVEPOINT``/``RELEASE``, ``ATTACH``, and
  any write or schema change to the ledger's tables and DBOS's.
- Postgres: each statement is read by Postgres's own parser (``pglast``, libpg_query); a transaction
  statement anywhere in the string, a write or DDL naming the ``helix`` or ``dbos`` schema (in a CTE
  too), and a change of ``search_path``, role or ``session_replication_role`` (ways round the schema
  name or the triggers) are refused. What the parser cannot see into (a function or ``DO`` block you
  wrote that writes the ledger) is not checked; Postgres itself refuses a ``COMMIT`` inside those
  within a transaction block.

A refusal raises ``ToolConnectionError`` before the statement runs, so the transaction is intact: a
body that catches it goes on; one that lets it raise is rolled back and that is the call's error.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy import event

from ..errors import ToolConnectionError
from .tables import SCHEMA, metadata

#: DBOS's system schema on Postgres (``dbos_private.SYSTEM_SCHEMA``; helix never changes it).
_DBOS_SCHEMA = "dbos"
_PROTECTED_SCHEMAS = frozenset({SCHEMA, _DBOS_SCHEMA})

#: On SQLite every table stands unqualified in one file: the ledger's, its Alembic table, DBOS's.
_DBOS_SQLITE_TABLES = frozenset({
    "workflow_status", "operation_outputs", "notifications", "workflow_events", "workflow_events_history",
    "streams", "queues", "application_versions", "workflow_schedules", "workflow_input", "workflow_output",
    "dbos_migrations", "event_dispatch_kv",
})
_SQLITE_PROTECTED = frozenset({table.name for table in metadata.tables.values()} | {"helix_alembic_version"} | _DBOS_SQLITE_TABLES)

_OFFERED = "execute, scalar, scalars and exec_driver_sql"


def _refuse(what: str) -> NoReturn:
    raise ToolConnectionError(
        f"a transactional body may not {what}: ctx.connection is the call's transaction, which commits with "
        "its result (or rolls back with its error); write your own tables through it and return",
        detail=what,
    )


class ToolConnection:
    """``ctx.connection`` of a transactional tool: the call's one transaction, for reads and writes only.

    Offers ``execute``, ``scalar``, ``scalars``, ``exec_driver_sql`` (as on a SQLAlchemy
    ``Connection``) and ``dialect``. Anything else, ``commit()``, ``rollback()``, ``begin()``,
    ``begin_nested()``, ``close()`` or the DBAPI connection, raises ``ToolConnectionError``."""

    __slots__ = ("_conn", "_denials")

    def __init__(self, conn: sa.Connection, denials: _Denials | None = None) -> None:
        self._conn = conn
        self._denials = denials

    @property
    def dialect(self) -> sa.Dialect:
        return self._conn.dialect

    def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> sa.CursorResult[Any]:
        with _translated(self._denials):
            return self._conn.execute(statement, parameters, execution_options=execution_options)

    def scalar(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        with _translated(self._denials):
            return self._conn.scalar(statement, parameters, execution_options=execution_options)

    def scalars(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> sa.ScalarResult[Any]:
        with _translated(self._denials):
            return self._conn.scalars(statement, parameters, execution_options=execution_options)

    def exec_driver_sql(self, statement: str, parameters: Any = None, execution_options: Any = None) -> sa.CursorResult[Any]:
        with _translated(self._denials):
            return self._conn.exec_driver_sql(statement, parameters, execution_options)

    def commit(self) -> NoReturn:
        _refuse("commit the call's transaction (it commits with the call's result)")

    def rollback(self) -> NoReturn:
        _refuse("roll back the call's transaction (raise instead: the body's writes roll back and the exception is the call's error)")

    def begin(self) -> NoReturn:
        _refuse("begin a transaction (the body already runs inside the call's one transaction)")

    def begin_nested(self) -> NoReturn:
        _refuse("begin a nested transaction (a savepoint would let part of the body's writes out of the call's unit)")

    def close(self) -> NoReturn:
        _refuse("close the call's connection")

    def __getattr__(self, name: str) -> NoReturn:
        if name == "_run_ddl_visitor":  # Table.create(conn) / MetaData.create_all(conn)
            _refuse(f"be given to Table.create or MetaData.create_all (run conn.execute(sa.schema.CreateTable(table, if_not_exists=True)); ctx.connection offers {_OFFERED} only)")
        _refuse(f"use {name!r} of the connection (ctx.connection offers {_OFFERED} only)")

    def __repr__(self) -> str:
        return f"<ToolConnection {self._conn.dialect.name}: the call's transaction>"


class _Denials:
    """The SQLite authorizer's last refusal, so the driver's bare "not authorized" can say why."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: str | None = None


@contextmanager
def _translated(denials: _Denials | None) -> Iterator[None]:
    """A SQLite authorizer's refusal surfaces as ``sqlite3.DatabaseError('not authorized')``: raise it
    as the typed refusal it is, with the reason the authorizer recorded."""
    try:
        yield
    except sa.exc.DBAPIError as exc:
        if denials is not None and isinstance(exc.orig, sqlite3.DatabaseError) and "not authorized" in str(exc.orig):
            why, denials.last = denials.last, None
            _refuse(why or "run this statement")
        raise


def _sqlite_authorizer(denials: _Denials) -> Any:
    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            denials.last = "begin, commit or roll back a transaction or a savepoint (the body runs inside the call's one transaction)"
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            denials.last = "attach or detach a database"
            return sqlite3.SQLITE_DENY
        table = _sqlite_written_table(action, arg1, arg2)
        if table is not None and table.lower() in _SQLITE_PROTECTED:
            denials.last = f"write the runtime's own table {table!r}"
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    return authorize


def _sqlite_written_table(action: int, arg1: str | None, arg2: str | None) -> str | None:
    """The table a write or schema change touches (SQLite's authorizer puts it in arg1 or arg2)."""
    if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE, sqlite3.SQLITE_DROP_TABLE):
        return arg1
    if action in (
        sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_CREATE_TRIGGER, sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER, sqlite3.SQLITE_DROP_TEMP_TRIGGER,  # a temp trigger may sit on a main table
    ):
        return arg2
    return None


# --- Postgres: each statement read by Postgres's own parser ----------------------------------------------

_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[sbt]|%%")
_GUC_REFUSED = frozenset({"search_path", "role", "session_authorization", "session_replication_role"})
_WRITES = frozenset({"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt", "CopyStmt", "LockStmt"})
_RELATIONS = frozenset({
    "TruncateStmt", "AlterTableStmt", "RenameStmt", "IndexStmt", "CreateTrigStmt", "RuleStmt", "CreateStmt",
    "VacuumStmt", "ClusterStmt", "GrantStmt", "CommentStmt", "CreateTableAsStmt", "RefreshMatViewStmt", "ViewStmt",
})


def _dollar_params(sql: str) -> str:
    """psycopg's placeholders (``%s``, ``%(name)s``) as Postgres's (``$n``), ``%%`` as ``%``: the text the
    server parses."""
    n = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal n
        if match.group() == "%%":
            return "%"
        n += 1
        return f"${n}"

    return _PLACEHOLDER.sub(sub, sql)


@functools.lru_cache(maxsize=512)
def pg_refusal(sql: str, has_params: bool) -> str | None:
    """Why this statement text may not run in a body (None: it may). Cached: a body's statements are
    few and repeat (Core compiles the same text every time)."""
    from pglast import parser  # libpg_query, loaded by the first guarded statement

    text = _dollar_params(sql) if has_params else sql
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except Exception:  # noqa: BLE001  (not SQL Postgres would run either: the server refuses it, nothing runs)
        return None
    return _pg_walk(tree)


def _pg_walk(node: Any) -> str | None:
    if isinstance(node, list):
        for item in node:
            if (why := _pg_walk(item)) is not None:
                return why
        return None
    if not isinstance(node, dict):
        return None
    for kind, body in node.items():
        if kind == "TransactionStmt":
            return "begin, commit or roll back a transaction or a savepoint (the body runs inside the call's one transaction)"
        if kind == "VariableSetStmt" and isinstance(body, dict) and body.get("name") in _GUC_REFUSED:
            return f"change {body['name']} (a way round the ledger's schema or its triggers)"
        if kind == "FuncCall" and isinstance(body, dict) and _funcname(body) == "set_config":
            return "call set_config (a way round the ledger's schema or its triggers)"
        if kind in _WRITES and isinstance(body, dict) and _protected(body.get("relation")):
            return f"write the runtime's own table {_relname(body['relation'])}"
        if kind == "LockStmt" and isinstance(body, dict):  # LOCK names its tables in a list, not one relation
            for rel in body.get("relations") or []:
                if _protected(rel):
                    return f"lock the runtime's own table {_relname(rel)}"
        if kind in _RELATIONS and isinstance(body, dict):
            for rel in [body.get("relation"), *(body.get("relations") or []), *(body.get("objects") or [])]:
                if _protected(rel):
                    return f"change the runtime's own table {_relname(rel)}"
        if kind == "DropStmt" and isinstance(body, dict):
            for obj in body.get("objects") or []:
                names = [i.get("String", {}).get("sval") for i in (obj.get("List", {}).get("items") or [])] if isinstance(obj, dict) else []
                if len(names) > 1 and names[0] in _PROTECTED_SCHEMAS:
                    return f"drop the runtime's own {'.'.join(str(n) for n in names)}"
                if body.get("removeType") == "OBJECT_SCHEMA" and isinstance(obj, dict) and obj.get("String", {}).get("sval") in _PROTECTED_SCHEMAS:
                    return "drop the runtime's own schema"
        if (why := _pg_walk(body)) is not None:
            return why
    return None


def _funcname(call: dict[str, Any]) -> str | None:
    names = [n.get("String", {}).get("sval") for n in call.get("funcname") or [] if isinstance(n, dict)]
    return names[-1] if names else None


def _protected(rel: Any) -> bool:
    if isinstance(rel, dict) and "RangeVar" in rel:
        rel = rel["RangeVar"]
    return isinstance(rel, dict) and rel.get("schemaname") in _PROTECTED_SCHEMAS


def _relname(rel: Any) -> str:
    if isinstance(rel, dict) and "RangeVar" in rel:
        rel = rel["RangeVar"]
    return f"{rel.get('schemaname')}.{rel.get('relname')}" if isinstance(rel, dict) else "?"


def _pg_check(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _executemany: bool) -> None:
    why = pg_refusal(statement, bool(parameters))
    if why is not None:
        _refuse(why)


@contextmanager
def guarded(conn: sa.Connection) -> Iterator[ToolConnection]:
    """The body's ``ToolConnection`` over ``conn``, with the database-side checks on for its duration."""
    if conn.dialect.name == "sqlite":
        raw = conn.connection.driver_connection
        assert raw is not None  # a connection inside its transaction always has its DBAPI connection
        denials = _Denials()
        raw.set_authorizer(_sqlite_authorizer(denials))  # also expires cached statements: each is authorized anew
        try:
            yield ToolConnection(conn, denials)
        finally:
            raw.set_authorizer(None)
        return
    event.listen(conn, "before_cursor_execute", _pg_check)
    try:
        yield ToolConnection(conn)
    finally:
        event.remove(conn, "before_cursor_execute", _pg_check)
