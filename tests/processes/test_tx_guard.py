"""A transactional body cannot end its transaction nor write the ledger.

``ctx.connection`` is a facade over the call's one transaction: ``commit``, ``rollback``, ``begin``
and their SQL spellings are refused with ``ToolConnectionError``, and so is any write to the
``helix`` (and ``dbos``) tables. Refusals change nothing, so a body that catches one goes on in the
same transaction, and exactly once holds whatever the body does, through a real SIGKILL too. Effect
rows are counted from a store outside the runtime. On SQLite the transaction holds the write lock
before the body's first read, so the docs' own ``book_slot`` example never books a slot twice.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import ToolConnectionError
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from tests.support.crashkit import Kit, helix_table, query, transcript_problems
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]

meta = sa.MetaData()
effects = sa.Table("guard_effects", meta, sa.Column("id", sa.Integer, primary_key=True, autoincrement=True), sa.Column("dispatch_id", sa.String(64)))


def _create(db_url: str, metadata: sa.MetaData) -> None:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
    finally:
        engine.dispose()


def _count(db_url: str, table: str, **where: Any) -> int:
    cond = " AND ".join(f"{k} = :{k}" for k in where) or "1=1"
    return int(query(db_url, f"SELECT count(*) AS n FROM {table} WHERE {cond}", **where)[0]["n"])


def _one_call(tool_name: str, args: dict[str, Any]) -> tuple[FunctionModel, list[Any]]:
    read: list[Any] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart(tool_name, args, tool_call_id="c0")])
        read.extend(p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(reply), read


def _rogue_statements(db_url: str) -> dict[str, str]:
    """What a careless body might run through its connection, in SQL."""
    h = (lambda name: name) if is_sqlite(db_url) else (lambda name: f"helix.{name}")
    out = {
        "sql_commit": "COMMIT",
        "sql_rollback": "ROLLBACK",
        "sql_begin": "BEGIN",
        "sql_savepoint": "SAVEPOINT mine",
        "sql_end": "END",
        "update_sessions": f"UPDATE {h('sessions')} SET status = 'completed'",
        "delete_events": f"DELETE FROM {h('events')}",
        "insert_stops": f"INSERT INTO {h('stops')} (run_id, kind) VALUES ('x', 'stop')",
        "drop_usage": f"DROP TABLE {h('usage')}",
        "dbos_status": "UPDATE workflow_status SET status = 'SUCCESS'" if is_sqlite(db_url) else "UPDATE dbos.workflow_status SET status = 'SUCCESS'",
    }
    if not is_sqlite(db_url):  # Postgres only: a way round the schema, and two statements in one string
        out["search_path"] = "SET LOCAL search_path TO helix"
        out["two_statements"] = "SELECT 1; COMMIT"
        out["truncate"] = "TRUNCATE helix.events"
        out["lock_sessions"] = "LOCK TABLE helix.sessions IN ACCESS EXCLUSIVE MODE"  # would hold every run's fence
    else:  # a temporary trigger is the connection's, but it fires on a main table's writes
        out["temp_trigger"] = "CREATE TEMP TRIGGER rogue AFTER INSERT ON main.events BEGIN DELETE FROM main.events; END"
    return out


def test_a_body_cannot_end_its_transaction_nor_write_the_ledger(db_url: str, make_runtime: Any) -> None:
    """Every attempt is refused with ``ToolConnectionError`` and changes nothing; the body catches
    each and goes on in the same transaction, so its one row commits with its result."""
    _create(db_url, meta)
    refused: dict[str, str] = {}
    rogue = _rogue_statements(db_url)

    @hx.tool(transactional=True)
    def misbehave(ctx: hx.ToolContext) -> dict[str, Any]:
        """Try everything a body must not do."""
        conn = ctx.require_connection()
        conn.execute(effects.insert().values(dispatch_id=ctx.require_dispatch_id()))
        attempts: dict[str, Any] = {
            "commit": lambda: conn.commit(),  # type: ignore[attr-defined]
            "rollback": lambda: conn.rollback(),  # type: ignore[attr-defined]
            "begin": lambda: conn.begin(),  # type: ignore[attr-defined]
            "begin_nested": lambda: conn.begin_nested(),  # type: ignore[attr-defined]
            "close": lambda: conn.close(),  # type: ignore[attr-defined]
            "dbapi": lambda: conn.connection,  # type: ignore[attr-defined]
            **{name: (lambda sql=sql: conn.exec_driver_sql(sql)) for name, sql in rogue.items()},
            "text_commit": lambda: conn.execute(sa.text("COMMIT")),
            "text_update_sessions": lambda: conn.execute(sa.text(rogue["update_sessions"])),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except ToolConnectionError as exc:
                refused[name] = exc.code
        # the transaction is intact: the body reads its own row
        return {"mine": conn.scalar(sa.select(sa.func.count()).select_from(effects).where(effects.c.dispatch_id == ctx.dispatch_id))}

    model, read = _one_call("misbehave", {})
    rt = make_runtime([hx.Agent("rogue", model, tools=[misbehave])])
    sessions_before = query(db_url, f"SELECT session_id, status FROM {helix_table(db_url, 'sessions')}")
    result = rt.start("rogue", "go").result(timeout=90)
    assert (result.status, result.error_code) == ("completed", None), result
    assert sorted(refused) == sorted(["commit", "rollback", "begin", "begin_nested", "close", "dbapi", *rogue, "text_commit", "text_update_sessions"])
    assert set(refused.values()) == {"tool_connection_refused"}
    [call] = rt.session(result.session_id).calls
    assert call.status == "ok" and call.result == {"mine": 1} and read == [{"mine": 1}]
    assert _count(db_url, "guard_effects", dispatch_id=call.dispatch_id) == 1
    assert len(sessions_before) == 0 and _count(db_url, helix_table(db_url, "events")) > 0  # the ledger's rows are its own
    assert _count(db_url, helix_table(db_url, "usage")) >= 1
    assert transcript_problems(db_url, result.session_id) == []


def test_a_body_that_lets_the_refusal_raise_is_the_calls_typed_error(db_url: str, make_runtime: Any) -> None:
    _create(db_url, meta)

    @hx.tool(transactional=True)
    def commits(ctx: hx.ToolContext) -> str:
        """Write, then commit by hand."""
        conn = ctx.require_connection()
        conn.execute(effects.insert().values(dispatch_id=ctx.require_dispatch_id()))
        conn.commit()  # type: ignore[attr-defined]
        return "committed"

    model, read = _one_call("commits", {})
    rt = make_runtime([hx.Agent("rogue", model, tools=[commits])])
    result = rt.start("rogue", "go").result(timeout=90)
    assert result.status == "completed", result
    [call] = rt.session(result.session_id).calls
    assert call.status == "error" and call.error is not None and call.error["type"] == "ToolConnectionError"
    assert "commit" in call.error["message"]
    assert _count(db_url, "guard_effects", dispatch_id=call.dispatch_id) == 0  # rolled back with the body
    assert read and read[0]["status"] == "error"


@pytest.mark.kills
@pytest.mark.parametrize("how", ["commit", "sql_commit", "rollback"])
def test_a_sigkill_after_a_self_commit_attempt_leaves_one_effect_row(db_url: str, tmp_path: Path, how: str) -> None:
    """The body writes its row, tries to commit (or roll back) by hand and swallows the refusal, then
    the process is SIGKILLed from outside with the transaction open. The relaunch runs the body
    again (no result committed: provably no effect), and exactly one row exists for the dispatch id."""
    k = Kit(db_url, tmp_path, scenario="tx_rogue")
    proc = k.spawn("start", extra_env={"SCENARIO_ROGUE": how, "SCENARIO_ROGUE_HOLD": "60"})
    try:
        wait_for("the body's self-commit attempt", lambda: bool(k.lines("rogue")), timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    [attempt] = k.lines("rogue")
    assert attempt["refused"] == "ToolConnectionError", attempt
    dispatch_id = attempt["dispatch_id"]
    assert _count(db_url, "scenario_tx_effects", dispatch_id=dispatch_id) == 0  # nothing committed before the kill
    out = k.wake(extra_env={"SCENARIO_ROGUE": how})
    assert out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    [call] = [c for c in out.result["calls"] if c["tool"] == "tx_rogue"]
    assert (call["status"], call["attempts"]) == ("ok", 2)
    assert _count(db_url, "scenario_tx_effects", dispatch_id=dispatch_id) == 1
    assert k.bodies()["tx_rogue"] == 2 and k.model_steps()[0] == 1  # the model was not asked again for step 0
    assert transcript_problems(db_url, k.session) == []


def test_a_long_transactional_body_is_not_an_outage(db_url: str, make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body that takes longer than the store retry window, beside two other calls of its reply:
    their writes wait behind it (a lock wait, not an unavailable store) and the run completes."""
    _create(db_url, meta)
    monkeypatch.setenv("HELIX_DBOS_STORE_RETRY_WINDOW", "3")
    hold = 8.0

    @hx.tool(transactional=True)
    def slow_book(ctx: hx.ToolContext) -> str:
        """A long booking."""
        conn = ctx.require_connection()
        conn.execute(effects.insert().values(dispatch_id=ctx.require_dispatch_id()))
        time.sleep(hold)
        return "booked"

    @hx.tool(replay="safe")
    async def quick(n: int) -> int:
        """A quick lookup."""
        return n

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("slow_book", {}, tool_call_id="a"), ToolCallPart("quick", {"n": 1}, tool_call_id="b"), ToolCallPart("quick", {"n": 2}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("done")])

    rt = make_runtime([hx.Agent("slow", FunctionModel(reply), tools=[slow_book, quick])])
    started = time.monotonic()
    result = rt.start("slow", "go").result(timeout=120)
    assert (result.status, result.error_code) == ("completed", None), result
    assert time.monotonic() - started >= hold
    calls = rt.session(result.session_id).calls
    assert sorted(c.status for c in calls) == ["ok", "ok", "ok"]
    assert _count(db_url, "guard_effects") == 1


# --- the docs' own example --------------------------------------------------------------------------


def _docs_book_slot() -> dict[str, Any]:
    """docs/writing-tools.md's transactional example, executed exactly as printed."""
    text = (ROOT / "docs" / "writing-tools.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def book_slot" in b)
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/writing-tools.md", "exec"), namespace)
    return namespace


def test_the_docs_book_slot_books_a_slot_once_when_called_twice_in_one_reply(db_url: str, make_runtime: Any) -> None:
    docs = _docs_book_slot()
    _create(db_url, docs["meta"])
    read: list[Any] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("book_slot", {"slot": "9am"}, tool_call_id=f"c{i}") for i in range(2)])
        read.extend(p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        return ModelResponse(parts=[TextPart("done")])

    rt = make_runtime([hx.Agent("booker", FunctionModel(reply), tools=[docs["book_slot"]])])
    for _ in range(3):  # the race was lost 3 times out of 3 on SQLite
        read.clear()
        result = rt.start("booker", "book it").result(timeout=90)
        assert result.status == "completed", result
        calls = rt.session(result.session_id).calls
        assert sorted(c.status for c in calls) == ["error", "ok"]
        [refused] = [c for c in calls if c.status == "error"]
        assert refused.error is not None and (refused.error["type"], refused.error["message"]) == ("ValueError", "slot 9am is taken")
        assert _count(db_url, "bookings", slot="9am") == 1
        assert sorted(str(r.get("status", "ok")) if isinstance(r, dict) else "ok" for r in read) == ["error", "ok"]
        engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM bookings"))
        engine.dispose()


def test_a_connection_dropped_under_the_body_retries_the_whole_transaction(pg_url: str) -> None:
    """The store drops every connection while a transactional body's transaction is open: the
    body's writes rolled back with it, so the whole transaction (body included) is tried again
    within the retry window, as any ledger transaction is; one effect row, the call ``ok`` on its
    first attempt, the run completed (it used to fail ``run_error``)."""
    import uuid

    from tests.support.tcpproxy import TcpProxy

    _create(pg_url, meta)
    proxy = TcpProxy.for_url(pg_url)
    bodies: list[int] = []

    @hx.tool(transactional=True)
    def record(ctx: hx.ToolContext) -> dict[str, Any]:
        """Write one effect row."""
        conn = ctx.require_connection()
        conn.execute(effects.insert().values(dispatch_id=ctx.require_dispatch_id()))
        bodies.append(1)
        if len(bodies) == 1:
            with proxy.outage(1.0):  # the database goes away under the open transaction, and comes back
                pass
        return {"bodies": len(bodies)}

    model, read = _one_call("record", {})
    rt = hx.Runtime([hx.Agent("dropped", model, tools=[record])], database_url=proxy.url(pg_url),
                    executor_id=f"test-{uuid.uuid4().hex[:8]}", store_retry_window=60)
    rt.launch()
    try:
        result = rt.start("dropped", "go").result(timeout=120)
        [call] = rt.session(result.session_id).calls
    finally:
        rt.shutdown()
        proxy.close()
    assert proxy.dropped > 0
    assert (result.status, result.error_code) == ("completed", None), result
    assert call.status == "ok" and len(call.attempts) == 1 and call.result == {"bodies": 2}, call
    assert len(bodies) == 2  # the first body's transaction was lost with its connection
    assert _count(pg_url, "guard_effects", dispatch_id=call.dispatch_id) == 1
    assert read == [{"bodies": 2}]
    assert transcript_problems(pg_url, result.session_id) == []
