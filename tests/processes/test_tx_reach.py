"""What a transactional body's SQL may reach: its own tables, and nothing of the runtime's, nor any
session state that outlives the call.

Each rogue body (``tests/scenarios/app.py``, ``_reach_attempts``) writes its own row, tries one thing
it must not do, records whether it was refused, and returns. It runs in a real process; everything
is counted from outside the runtime: the body's own table, the ledger's sessions (nobody's session
given to a new owner), DBOS's workflow rows (none forged), the database's settings, SQLite's schema
(``PRAGMA integrity_check``), and a later run, in a later process, that completes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError, ToolConnectionError
from helix_dbos.ledger.engine import is_sqlite
from tests.scenarios.app import RAW_ROGUES
from tests.support.crashkit import Kit, calls_by_tool, helix_table, query, transcript_problems
from tests.processes.test_tx_guard import _create, _one_call, effects, meta

#: Refused at the guard, on both databases.
BOTH = ["read_only", "driver_read_only", "temp_view"]
PG_ONLY = ["alter_schema", "set_schema", "alter_database", "private_lock", "dbos_enqueue", "driver_set_config"]
SQLITE_ONLY = ["writable_schema", "sqlite_master"]


def _ledger_state(db_url: str) -> dict[str, Any]:
    """What the rogues aim at, read as an auditor would."""
    state: dict[str, Any] = {
        "thieves": query(db_url, f"SELECT count(*) AS n FROM {helix_table(db_url, 'sessions')} WHERE owner = 'thief'")[0]["n"],
    }
    if is_sqlite(db_url):
        state["integrity"] = query(db_url, "PRAGMA integrity_check")[0]["integrity_check"]
        state["indexes"] = query(db_url, "SELECT count(*) AS n FROM sqlite_master WHERE type = 'index'")[0]["n"]
    else:
        state["forged"] = query(db_url, "SELECT count(*) AS n FROM dbos.workflow_status WHERE workflow_uuid = 'forged'")[0]["n"]
        state["db_settings"] = query(db_url, "SELECT count(*) AS n FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database()")[0]["n"]
        state["schemas"] = sorted(r["nspname"] for r in query(db_url, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'helix%'"))
        state["sessions_schema"] = query(db_url, "SELECT table_schema FROM information_schema.tables WHERE table_name = 'sessions' AND table_schema <> 'pg_catalog'")
    return state


@pytest.mark.parametrize("rogue", BOTH + PG_ONLY + SQLITE_ONLY + sorted(RAW_ROGUES))
def test_a_body_reaches_only_its_own_tables(db_url: str, tmp_path: Path, rogue: str) -> None:
    if rogue in (SQLITE_ONLY if not is_sqlite(db_url) else PG_ONLY):
        pytest.skip("the other database's way in")
    other = Kit(db_url, tmp_path / "other", scenario="tx")  # another session, whose owner must not change
    assert other.start().code == 0
    k = Kit(db_url, tmp_path / "rogue", scenario="tx_rogue")
    before = _ledger_state(db_url)
    out = k.start(extra_env={"SCENARIO_ROGUE": rogue})
    assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    [tried] = k.lines("rogue")
    call = calls_by_tool(out.result)["tx_rogue"]
    rows = int(query(db_url, "SELECT count(*) AS n FROM scenario_tx_effects WHERE dispatch_id = :d", d=call["dispatch_id"])[0]["n"])
    if rogue in RAW_ROGUES:  # past the guard through the driver: nothing refused it, the discarded connection ends it
        assert tried["refused"] is None, tried
        assert (call["status"], rows) in (("ok", 1), ("error", 0)), (call, rows)  # SQLite's query_only fails the result write itself
        assert "[SQL:" not in str(call) and "[SQL:" not in str(out.result)
    else:
        # ToolConnectionError: the guard; DatabaseError: SQLite's driver under the authorizer;
        # OperationalError: SQLite itself ("sqlite_master may not be modified": writable_schema stays off)
        assert tried["refused"] in ("ToolConnectionError", "DatabaseError", "OperationalError"), tried
        assert call["status"] == "ok" and rows == 1, (call, rows)
    assert _ledger_state(db_url) == before
    assert transcript_problems(db_url, k.session) == []
    for kit in (k, other):  # later runs, in later processes, on both sessions
        later = kit.entry("turn", message="again", extra_env={"SCENARIO_ROGUE": "commit"})
        assert later.code == 0 and later.result is not None and later.result["status"] == "completed", later.stderr[-3000:]


def _session_setter(db_url: str) -> tuple[str, str]:
    """A setting that, left on a pooled connection, broke every later run: set through the driver,
    past the guard, as Python code always can."""
    if is_sqlite(db_url):
        return "PRAGMA query_only = ON", "PRAGMA query_only"
    return "SET default_transaction_read_only = on", "SHOW default_transaction_read_only"


def test_a_setting_made_in_a_body_ends_with_the_call(db_url: str, make_runtime: Any) -> None:
    """The body's connection is closed after the call, never pooled again: the same process's later
    runs (six) complete, each on a connection without the setting."""
    _create(db_url, meta)
    setter, show = _session_setter(db_url)
    seen: list[Any] = []

    @hx.tool(transactional=True)
    def settle(ctx: hx.ToolContext) -> str:
        """Write a row, read the setting, then change it through the driver."""
        conn = ctx.require_connection()
        conn.execute(effects.insert().values(dispatch_id=ctx.require_dispatch_id()))
        raw = conn.execute(sa.select(sa.literal(1))).cursor.connection  # type: ignore[attr-defined]
        if conn.dialect.name == "sqlite":
            raw.set_authorizer(None)
            seen.append(raw.execute(show).fetchone()[0])
            raw.execute(setter)
        else:
            import psycopg

            cur = psycopg.Cursor(raw)
            seen.append(cur.execute(show).fetchone()[0])  # type: ignore[index]
            cur.execute(setter)
        return "set"

    model, _ = _one_call("settle", {})
    rt = make_runtime([hx.Agent("setter", model, tools=[settle])])
    for _ in range(6):
        result = rt.start("setter", "go").result(timeout=90)
        assert (result.status, result.error_code) == ("completed", None), result
        assert "[SQL:" not in str(result.error)
    assert seen == [0 if is_sqlite(db_url) else "off"] * 6  # every body began on a fresh connection


def test_a_runs_error_from_a_statement_never_shows_the_sql() -> None:
    from helix_dbos.runtime.flow.workflow import failure

    exc = sa.exc.OperationalError("UPDATE helix.sessions SET owner = %(o)s", {"o": "x"}, Exception("cannot execute UPDATE in a read-only transaction"))
    code, text = failure(exc)
    assert code == "store_statement_failed"
    assert "read-only transaction" in text and "helix.sessions" not in text and "[SQL:" not in text


# --- what a body may do, and how a tool opts into DDL (docs/writing-tools.md's table) ----------------


def _body_sql(db_url: str, make_runtime: Any, statements: list[str], allows: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Run each statement in one transactional body; what happened to each (None: it ran)."""
    outcome: dict[str, str | None] = {}

    @hx.tool(transactional=True, sql_allows=allows)
    def run_sql(ctx: hx.ToolContext) -> str:
        """Run the statements."""
        conn = ctx.require_connection()
        for sql in statements:
            try:
                conn.exec_driver_sql(sql)
                outcome[sql] = None
            except ToolConnectionError as exc:
                outcome[sql] = exc.code
        return "ran"

    model, _ = _one_call("run_sql", {})
    rt = make_runtime([hx.Agent("sql", model, tools=[run_sql])])
    result = rt.start("sql", "go").result(timeout=90)
    assert result.status == "completed", result
    [call] = rt.session(result.session_id).calls
    assert call.status == "ok", call
    return outcome


def test_queries_and_dml_on_its_own_tables_run(db_url: str, make_runtime: Any) -> None:
    _create(db_url, meta)
    done = _body_sql(db_url, make_runtime, [
        "INSERT INTO guard_effects (dispatch_id) VALUES ('a')",
        "UPDATE guard_effects SET dispatch_id = 'b' WHERE dispatch_id = 'a'",
        "SELECT count(*) FROM guard_effects",
        "WITH x AS (SELECT 1 AS n) SELECT n FROM x",
        "DELETE FROM guard_effects WHERE dispatch_id = 'b'",
    ])
    assert set(done.values()) == {None}, done


DDL = ["CREATE TABLE mine (id integer primary key, code varchar(8) unique)", "CREATE INDEX ix_mine ON mine (id)", "DROP INDEX ix_mine", "DROP TABLE mine"]


def test_ddl_is_refused_unless_the_tool_opts_in(db_url: str, make_runtime: Any) -> None:
    _create(db_url, meta)
    refused = _body_sql(db_url, make_runtime, [
        "CREATE TABLE mine (id integer primary key)", "CREATE INDEX ix_g ON guard_effects (dispatch_id)",
        "ALTER TABLE guard_effects ADD COLUMN extra integer", "DROP TABLE guard_effects",
    ])
    assert set(refused.values()) == {"tool_connection_refused"}, refused


def test_ddl_runs_when_the_tool_opts_in_by_name(db_url: str, make_runtime: Any) -> None:
    ran = _body_sql(db_url, make_runtime, DDL, allows=("create table", "CREATE INDEX", "DROP INDEX", "DROP TABLE"))
    assert set(ran.values()) == {None}, ran


def test_the_runtimes_tables_are_not_read_even_by_an_opted_in_tool(db_url: str, make_runtime: Any) -> None:
    if is_sqlite(db_url):  # SQLite checks a view's tables when it is used, not when it is made
        statements = ["SELECT count(*) FROM sessions", "CREATE TEMP VIEW peek AS SELECT * FROM calls", "SELECT * FROM peek",
                      "CREATE INDEX ix_peek ON calls (tool_name)"]
        expected = {"SELECT count(*) FROM sessions": "tool_connection_refused", "CREATE TEMP VIEW peek AS SELECT * FROM calls": None,
                    "SELECT * FROM peek": "tool_connection_refused", "CREATE INDEX ix_peek ON calls (tool_name)": "tool_connection_refused"}
    else:
        statements = ["SELECT count(*) FROM helix.sessions", "CREATE TEMP VIEW peek AS SELECT * FROM helix.calls",
                      "CREATE INDEX ix_peek ON helix.calls (tool_name)", "SELECT count(*) FROM helix_private.executor_locks"]
        expected = dict.fromkeys(statements, "tool_connection_refused")
    assert _body_sql(db_url, make_runtime, statements, allows=("CREATE VIEW", "CREATE INDEX")) == expected


def test_an_opt_in_names_a_kind_the_guard_knows() -> None:
    def body(ctx: hx.ToolContext) -> None:
        """A body."""

    with pytest.raises(ConfigurationError, match="sql_allows"):
        hx.tool(transactional=True, sql_allows=["SET"])(body)
    with pytest.raises(ConfigurationError, match="transactional"):
        hx.tool(sql_allows=["CREATE TABLE"])(body)


def test_a_search_path_naming_the_ledger_does_not_lead_a_body_into_it(pg_url: str) -> None:
    """An operator set the database's default ``search_path`` to ``helix, public``: a body's
    unqualified ``UPDATE sessions`` would have reached the ledger (the guard sees no schema in it).
    The body's transaction drops the runtime's schemas from its path, so the name finds no table:
    the statement fails, the body's error is the call's answer, and no session changed owner."""
    import uuid

    db = query(pg_url, "SELECT current_database() AS d")[0]["d"]
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{db}" SET search_path = helix, public')
    admin.dispose()

    @hx.tool(transactional=True)
    def steal(ctx: hx.ToolContext) -> str:
        """Give every session to a new owner, by an unqualified name."""
        ctx.require_connection().exec_driver_sql("UPDATE sessions SET owner = 'thief'")
        return "stolen"

    model, _ = _one_call("steal", {})
    rt = hx.Runtime([hx.Agent("thief", model, tools=[steal])], database_url=pg_url, executor_id=f"test-{uuid.uuid4().hex[:8]}").launch()
    try:
        result = rt.start("thief", "go").result(timeout=90)
        [call] = rt.session(result.session_id).calls
    finally:
        rt.shutdown()
    assert result.status == "completed", result
    assert call.status == "error" and call.error is not None and "sessions" in call.error["message"], call
    assert "[SQL:" not in str(call.error)
    assert query(pg_url, "SELECT count(*) AS n FROM helix.sessions WHERE owner = 'thief'")[0]["n"] == 0
    assert query(pg_url, "SELECT count(*) AS n FROM helix.sessions")[0]["n"] >= 1
