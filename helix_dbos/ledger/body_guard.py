"""What a transactional body's SQL may reach: its own tables, through plain queries and DML. An allow-list.

A transactional tool's exactly-once rests on one fact: the body's writes and the call's result commit
in one database transaction, or neither does. The body never holds the SQLAlchemy ``Connection``: it
gets a ``ToolConnection``, which offers ``execute``, ``scalar``, ``scalars`` and ``exec_driver_sql``
and nothing that ends, begins or leaves the transaction, and every statement it sends is checked
before it runs, against what is allowed (never against a list of what is not):

- a query (``SELECT``, ``WITH``, ``VALUES``) and ``INSERT``/``UPDATE``/``DELETE`` (``MERGE`` on Postgres)
  on the user's own tables; and the DDL kinds a tool names in ``sql_allows`` (``sql_kinds.SQL_OPT_INS``:
  ``CREATE TABLE``, ``CREATE INDEX``, ``CREATE VIEW``, ``ALTER TABLE``, ``DROP TABLE``, ``DROP INDEX``,
  ``DROP VIEW``, ``TRUNCATE``, ``LOCK``);
- never a table or function of ``helix``, ``helix_private``, ``dbos`` (read or written), never a write
  to the system catalogs, never a function that changes settings or takes session locks
  (``set_config``, ``pg_advisory_lock``...); on SQLite never the runtime's or DBOS's tables,
  ``sqlite_master`` only through an opted-in DDL, and ``PRAGMA`` only the read-only ones that
  describe a table (``table_info``...).

Where it is checked: SQLite, an authorizer on the connection for the body's duration (SQLite asks it
about every table a statement reads or writes, triggers and views included). Postgres: each
statement is read by Postgres's own parser (``pglast``), in the cursor class the driver's connection
makes for the body's duration, so a statement sent through the driver's own connection (reached
through a result's cursor) is checked too. A refusal raises ``ToolConnectionError`` before the
statement runs, so the transaction is intact.

Where it stops: Python code can always reach the driver below it (turn the SQLite authorizer off,
build a psycopg cursor by hand, commit the driver's connection). The guard does not claim otherwise:
the call's marker (``tx_marks``), written in the transaction before the body, keeps exactly-once
whatever the body does, and the body's connection is closed after the call (never pooled again), so
no setting it made outlives it.
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

from ..errors import ToolConnectionError
from ..sql_kinds import SQL_OPT_INS
from .tables import SCHEMA, metadata

#: DBOS's system schema on Postgres (``dbos_private.SYSTEM_SCHEMA``; helix never changes it).
_DBOS_SCHEMA = "dbos"
_PROTECTED_SCHEMAS = frozenset({SCHEMA, "helix_private", _DBOS_SCHEMA})
#: Schemas a body may read (a catalog query) but never write.
_CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema", "pg_toast"})

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
            _refuse(f"be given to Table.create or MetaData.create_all (with sql_allows=['CREATE TABLE'], run conn.execute(sa.schema.CreateTable(table, if_not_exists=True)); ctx.connection offers {_OFFERED} only)")
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
    """A SQLite authorizer's refusal surfaces as ``sqlite3.DatabaseError`` ("not authorized", or "access
    to t.c is prohibited" for a read): raise it as the typed refusal it is, with the reason the
    authorizer recorded."""
    if denials is not None:
        denials.last = None  # a refusal is this statement's, never an earlier one's
    try:
        yield
    except sa.exc.DBAPIError as exc:
        if denials is not None and isinstance(exc.orig, sqlite3.DatabaseError) and (
            denials.last is not None or "not authorized" in str(exc.orig) or "prohibited" in str(exc.orig)
        ):
            why, denials.last = denials.last, None
            _refuse(why or "run this statement")
        raise


#: PRAGMAs a body may run: each only describes a table, and none takes a value to set.
_SQLITE_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"})
#: SQLite's own tables: written only by an opted-in DDL statement (SQLite writes them then).
_SQLITE_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema", "sqlite_sequence"})


def _sqlite_ddl() -> dict[int, str]:
    c = sqlite3
    return {
        c.SQLITE_CREATE_TABLE: "CREATE TABLE", c.SQLITE_CREATE_TEMP_TABLE: "CREATE TABLE",
        c.SQLITE_CREATE_INDEX: "CREATE INDEX", c.SQLITE_CREATE_TEMP_INDEX: "CREATE INDEX",
        c.SQLITE_CREATE_VIEW: "CREATE VIEW", c.SQLITE_CREATE_TEMP_VIEW: "CREATE VIEW",
        c.SQLITE_ALTER_TABLE: "ALTER TABLE",
        c.SQLITE_DROP_TABLE: "DROP TABLE", c.SQLITE_DROP_TEMP_TABLE: "DROP TABLE",
        c.SQLITE_DROP_INDEX: "DROP INDEX", c.SQLITE_DROP_TEMP_INDEX: "DROP INDEX",
        c.SQLITE_DROP_VIEW: "DROP VIEW", c.SQLITE_DROP_TEMP_VIEW: "DROP VIEW",
    }


def _sqlite_authorizer(denials: _Denials, allows: frozenset[str]) -> Any:
    c = sqlite3
    ddl = _sqlite_ddl()
    writes = {c.SQLITE_INSERT, c.SQLITE_UPDATE, c.SQLITE_DELETE}

    def deny(why: str) -> int:
        denials.last = why
        return c.SQLITE_DENY

    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
        if action in (c.SQLITE_SELECT, c.SQLITE_RECURSIVE):
            return c.SQLITE_OK
        if action == c.SQLITE_FUNCTION:  # arg2: the function's name
            return deny("call load_extension") if (arg2 or "").lower() == "load_extension" else c.SQLITE_OK
        if action in (c.SQLITE_READ, *writes):
            table = (arg1 or "").lower()
            if table in _SQLITE_PROTECTED:
                return deny(f"{'read' if action == c.SQLITE_READ else 'write'} the runtime's own table {arg1!r}")
            if action in writes and table in _SQLITE_SCHEMA_TABLES and not allows:
                return deny(f"write SQLite's own table {arg1!r}")
            return c.SQLITE_OK
        if action in ddl:
            table = (arg1 or "").lower()
            target = (arg2 or "").lower() if action in (c.SQLITE_CREATE_INDEX, c.SQLITE_CREATE_TEMP_INDEX, c.SQLITE_DROP_INDEX, c.SQLITE_DROP_TEMP_INDEX, c.SQLITE_ALTER_TABLE) else table
            if target in _SQLITE_PROTECTED or table in _SQLITE_PROTECTED:
                return deny(f"change the runtime's own table {arg2 if target in _SQLITE_PROTECTED else arg1!r}")
            kind = ddl[action]
            if kind == "CREATE INDEX" and table.startswith("sqlite_autoindex_"):
                kind = "CREATE TABLE"  # a table's own key index, made by its CREATE TABLE
            if kind not in allows:
                return deny(_not_opted(kind))
            return c.SQLITE_OK
        if action == c.SQLITE_PRAGMA:
            if (arg1 or "").lower() in _SQLITE_PRAGMAS:
                return c.SQLITE_OK
            return deny(f"run PRAGMA {arg1} (a setting of the connection or the database file; only {', '.join(sorted(_SQLITE_PRAGMAS))} may run)")
        if action == c.SQLITE_REINDEX and allows & {"CREATE INDEX", "CREATE TABLE"}:  # SQLite asks it of every index it makes
            return c.SQLITE_OK
        if action in (c.SQLITE_TRANSACTION, c.SQLITE_SAVEPOINT):
            return deny("begin, commit or roll back a transaction or a savepoint (the body runs inside the call's one transaction)")
        if action in (c.SQLITE_ATTACH, c.SQLITE_DETACH):
            return deny("attach or detach a database")
        return deny(f"run this kind of statement (SQLite action {action}: triggers, virtual tables, ANALYZE, REINDEX are never a body's)")

    return authorize


def _not_opted(kind: str) -> str:
    return f"run {kind} (the tool did not opt into it: @hx.tool(transactional=True, sql_allows=[{kind!r}]))"


# --- Postgres: each statement read by Postgres's own parser ----------------------------------------------

_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[sbt]|%%")

#: Statement kinds every body may run: queries and plain DML.
_PLAIN = frozenset({"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"})
#: Functions no body may call, whatever schema they are named in: they change settings, take or free
#: session locks (which outlive the transaction), signal other sessions, or reach the server's files.
_FUNCS_REFUSED = frozenset({
    "set_config", "pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
    "pg_advisory_unlock", "pg_advisory_unlock_shared", "pg_advisory_unlock_all", "pg_terminate_backend", "pg_cancel_backend",
    "pg_reload_conf", "pg_rotate_logfile", "pg_promote", "pg_switch_wal", "pg_create_restore_point", "pg_read_file",
    "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export", "dblink", "dblink_exec", "dblink_connect",
    "pg_logical_emit_message", "pg_replication_origin_create", "pg_backup_start", "pg_backup_stop",
})
_DROPS = {"OBJECT_TABLE": "DROP TABLE", "OBJECT_INDEX": "DROP INDEX", "OBJECT_VIEW": "DROP VIEW"}
_RENAMES = frozenset({"OBJECT_TABLE", "OBJECT_COLUMN", "OBJECT_TABCONSTRAINT", "OBJECT_INDEX"})


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
def pg_refusal(sql: str, has_params: bool, allows: frozenset[str] = frozenset()) -> str | None:
    """Why this statement text may not run in a body (None: it may). Cached: a body's statements are
    few and repeat (Core compiles the same text every time)."""
    from pglast import parser  # libpg_query, loaded by the first guarded statement

    text = _dollar_params(sql) if has_params else sql
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except Exception:  # noqa: BLE001  (an allow-list refuses what it cannot read)
        return "run SQL that Postgres's parser (pglast) cannot read"
    for entry in tree.get("stmts") or []:
        stmt = entry.get("stmt") if isinstance(entry, dict) else None
        if not isinstance(stmt, dict) or len(stmt) != 1:
            return "run this statement"
        [(kind, body)] = stmt.items()
        why = _pg_kind(kind, body if isinstance(body, dict) else {}, allows)
        if why is None:
            why = _pg_walk(stmt, writing=kind != "SelectStmt" or "intoClause" in body)
        if why is not None:
            return why
    return None


def _pg_kind(kind: str, body: dict[str, Any], allows: frozenset[str]) -> str | None:
    """Whether the statement's kind is allowed: plain queries and DML, or a DDL kind the tool named."""
    wanted: str | None = None
    if kind in _PLAIN:
        wanted = "CREATE TABLE" if kind == "SelectStmt" and "intoClause" in body else None
    elif kind in ("CreateStmt", "CreateTableAsStmt"):
        wanted = "CREATE TABLE" if body.get("objtype", "OBJECT_TABLE") == "OBJECT_TABLE" else ""
    elif kind == "IndexStmt":
        wanted = "CREATE INDEX"
    elif kind == "ViewStmt":
        wanted = "CREATE VIEW"
    elif kind == "AlterTableStmt":
        wanted = "ALTER TABLE" if body.get("objtype") == "OBJECT_TABLE" else ""
    elif kind == "RenameStmt":
        wanted = "ALTER TABLE" if body.get("renameType") in _RENAMES and "relation" in body else ""
    elif kind == "DropStmt":
        wanted = _DROPS.get(str(body.get("removeType")), "")
    elif kind == "TruncateStmt":
        wanted = "TRUNCATE"
    elif kind == "LockStmt":
        wanted = "LOCK"
    elif kind == "TransactionStmt":
        return "begin, commit or roll back a transaction or a savepoint (the body runs inside the call's one transaction)"
    elif kind in ("VariableSetStmt", "AlterSystemStmt", "AlterDatabaseSetStmt", "AlterRoleSetStmt", "DiscardStmt"):
        return "change a setting (a body's session state would outlive the call; a setting is never a body's)"
    else:
        wanted = ""
    if wanted is None:
        return None
    if wanted == "" or wanted not in SQL_OPT_INS:
        return f"run a {kind.removesuffix('Stmt')} statement (a body runs queries and DML on its own tables, and the DDL kinds it opts into: {', '.join(sorted(SQL_OPT_INS))})"
    return None if wanted in allows else _not_opted(wanted)


def _pg_walk(node: Any, *, writing: bool) -> str | None:
    """Every relation and function the statement names: none of the runtime's, no catalog written,
    no function that reaches past the transaction."""
    if isinstance(node, list):
        for item in node:
            if (why := _pg_walk(item, writing=writing)) is not None:
                return why
        return None
    if not isinstance(node, dict):
        return None
    if "relname" in node:  # a RangeVar, bare or wrapped
        schema = node.get("schemaname")
        if schema in _PROTECTED_SCHEMAS:
            return f"reach the runtime's own table {schema}.{node.get('relname')}"
        if writing and (schema in _CATALOG_SCHEMAS or (schema is None and str(node.get("relname", "")).startswith("pg_"))):
            return f"write the system catalog ({node.get('relname')})"
    for kind, body in node.items():
        if kind == "FuncCall" and isinstance(body, dict):
            names = [str(n.get("String", {}).get("sval")) for n in body.get("funcname") or [] if isinstance(n, dict)]
            if len(names) > 1 and names[0] in _PROTECTED_SCHEMAS:
                return f"call the runtime's own function {'.'.join(names)}"
            if names and names[-1].lower() in _FUNCS_REFUSED:
                return f"call {names[-1]} (it reaches past the call's transaction)"
        if kind == "DropStmt" and isinstance(body, dict):
            for obj in body.get("objects") or []:
                names = [i.get("String", {}).get("sval") for i in (obj.get("List", {}).get("items") or [])] if isinstance(obj, dict) else []
                if len(names) > 1 and names[0] in _PROTECTED_SCHEMAS:
                    return f"drop the runtime's own {'.'.join(str(n) for n in names)}"
        if kind == "newschema" and body in _PROTECTED_SCHEMAS | _CATALOG_SCHEMAS:
            return f"move a table into {body}"
        if (why := _pg_walk(body, writing=writing)) is not None:
            return why
    return None


def _query_text(query: Any, cursor: Any) -> str:
    if isinstance(query, bytes | bytearray | memoryview):
        return bytes(query).decode()
    if isinstance(query, str):
        return query
    as_string = getattr(query, "as_string", None)  # psycopg.sql.Composable
    return str(as_string(cursor)) if callable(as_string) else str(query)


def _pg_cursor_classes(allows: frozenset[str]) -> tuple[type[Any], type[Any]]:
    """psycopg cursor classes that check each statement before it is sent: set as the driver
    connection's factories for the body's duration, so SQLAlchemy's statements and any the body
    sends through the driver's own connection (``result.cursor.connection``) are checked alike."""
    import psycopg

    def check(cursor: Any, query: Any, params: Any) -> None:
        why = pg_refusal(_query_text(query, cursor), params is not None and len(params) > 0, allows)
        if why is not None:
            _refuse(why)

    class GuardedCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            check(self, query, params)
            return super().execute(query, params, **kw)

        def executemany(self, query: Any, params_seq: Any, **kw: Any) -> None:
            params_seq = list(params_seq)
            check(self, query, params_seq[0] if params_seq else None)
            super().executemany(query, params_seq, **kw)

        def stream(self, query: Any, params: Any = None, **kw: Any) -> Any:
            check(self, query, params)
            return super().stream(query, params, **kw)

        def copy(self, *_args: Any, **_kw: Any) -> Any:
            _refuse("run COPY")

    class GuardedServerCursor(psycopg.ServerCursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            check(self, query, params)
            return super().execute(query, params, **kw)

    return GuardedCursor, GuardedServerCursor


def _pg_own_schemas(conn: sa.Connection) -> None:
    """A ``search_path`` that names a schema of the runtime's (the database's or the role's default)
    would let an unqualified name reach the ledger: drop those schemas from it for this transaction."""
    path = [str(s) for s in conn.exec_driver_sql("SELECT current_schemas(false)").scalar() or []]
    if any(s in _PROTECTED_SCHEMAS for s in path):
        kept = ", ".join('"' + s.replace('"', '""') + '"' for s in path if s not in _PROTECTED_SCHEMAS) or "pg_catalog"
        conn.exec_driver_sql(f"SET LOCAL search_path TO {kept}")


@contextmanager
def guarded(conn: sa.Connection, allows: frozenset[str] = frozenset()) -> Iterator[ToolConnection]:
    """The body's ``ToolConnection`` over ``conn``, with the database-side checks on for its duration
    (``allows``: the DDL kinds the tool opted into, ``sql_kinds.SQL_OPT_INS``)."""
    raw = conn.connection.driver_connection
    assert raw is not None  # a connection inside its transaction always has its DBAPI connection
    if conn.dialect.name == "sqlite":
        denials = _Denials()
        raw.set_authorizer(_sqlite_authorizer(denials, allows))  # also expires cached statements: each is authorized anew
        try:
            yield ToolConnection(conn, denials)
        finally:
            raw.set_authorizer(None)
        return
    _pg_own_schemas(conn)
    before = raw.cursor_factory, raw.server_cursor_factory
    raw.cursor_factory, raw.server_cursor_factory = _pg_cursor_classes(allows)
    try:
        yield ToolConnection(conn)
    finally:
        raw.cursor_factory, raw.server_cursor_factory = before
