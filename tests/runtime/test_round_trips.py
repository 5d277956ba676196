"""Round trips a run no longer pays, on a real database: the gates of a group commit read their
step once (``runtime/floor/step_memo.py``), a model request after a step commit reads inside that
commit's transaction (``workflow._ending``'s ``then``), and a step's calls are one INSERT on Postgres.

Each is the same ledger as before, reached with fewer statements: the run's events, calls and
answer are checked too, so a shortcut that changed what is written would fail here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from pydantic_ai.messages import ToolCallPart

import helix_dbos as hx
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.runtime.floor import step_memo
from tests.runtime.test_core_run import scripted


def lookup(ctx: hx.ToolContext, key: str) -> str:
    """Look a key up."""
    return key.upper()


#: The ledger's schema as statements name it: ``helix`` on Postgres, ``main`` on SQLite.
_SCHEMA = r"(?:helix|main)"


def _is_step_read(statement: str) -> bool:
    """The gate's and the step commit's read: a step's calls with the fence beside them."""
    return "fence_status" in statement and re.search(rf"{_SCHEMA}\.calls\b", statement) is not None and "superseded" not in statement


def _is_messages_read(statement: str) -> bool:
    """A model request's read: the fence, the superseded count and the new messages."""
    return "fence_status" in statement and "superseded" in statement


def _attempts_opened(statement: str) -> int:
    return len(re.findall(rf"INSERT INTO {_SCHEMA}\.attempts\b", statement))


def _is_work(statement: str) -> bool:
    """A statement of a transaction's own (not its BEGIN, not a model request's read)."""
    return not statement.lstrip().upper().startswith("BEGIN") and not _is_messages_read(statement)


def test_a_runs_transactions_read_each_step_once_per_group_and_ask_the_model_without_a_transaction_of_its_own(make_runtime: Any, db_url: str) -> None:
    model, _ = scripted(*[[ToolCallPart("lookup", {"key": f"{s}{i}"}, f"c{s}{i}") for i in range(3)] for s in "ab"], "done")
    rt = make_runtime([hx.Agent("looker", model, tools=[hx.tool(replay="safe")(lookup)])])
    assert rt._launched is not None and rt._launched.runner is not None
    engine = rt._launched.runner.registry.env.tx_engine
    open_tx: dict[int, list[str]] = defaultdict(list)
    done: list[list[str]] = []
    many_calls: list[bool] = []

    def seen(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        open_tx[id(conn.connection.dbapi_connection)].append(statement)
        if re.match(rf"\s*INSERT INTO {_SCHEMA}\.calls\b", statement):
            many_calls.append(executemany)

    def ended(conn: sa.Connection) -> None:
        done.append(open_tx.pop(id(conn.connection.dbapi_connection), []))

    sa.event.listen(engine, "before_cursor_execute", seen)
    sa.event.listen(engine, "commit", ended)
    try:
        handle = rt.start("looker", "look six keys up")
        result = handle.result(timeout=120)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
        sa.event.remove(engine, "commit", ended)
    assert result.status == "completed" and result.output == "done", result

    gate_groups = [tx for tx in done if sum(_attempts_opened(s) for s in tx) >= 2]
    assert gate_groups, "no group of gates formed: the rule below would hold vacuously"
    for tx in gate_groups:  # three gates, one read of their step (three before)
        assert sum(_is_step_read(s) for s in tx) == 1, tx
    with_reads = [tx for tx in done if any(_is_messages_read(s) for s in tx)]
    assert len(with_reads) >= 3, done  # one per model request: the prepare's, then each step commit's
    for tx in with_reads:  # never a transaction of its own (BEGIN, the read, COMMIT)
        assert any(_is_work(s) for s in tx), tx
    if not is_sqlite(db_url):  # one multi-row INSERT per step (SQLite: an executemany, in process)
        assert many_calls == [False, False], many_calls

    check = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with check.connect() as conn:
            c = t.calls.c
            calls = conn.execute(sa.select(c.tool_call_id, c.status, c.attempts, c.result).where(c.session_id == handle.session_id)).all()
            kinds = conn.execute(sa.select(t.events.c.type).where(t.events.c.session_id == handle.session_id)).scalars().all()
    finally:
        check.dispose()
    assert sorted((r.tool_call_id, r.status, r.attempts, r.result) for r in calls) == sorted(
        (f"c{s}{i}", "ok", 1, f"{s}{i}".upper()) for s in "ab" for i in range(3)
    )
    assert kinds.count("tool_start") == 6 and kinds.count("tool_end") == 6 and kinds.count("call_saved") == 6


def test_the_step_memo_hands_out_copies_patches_an_attempt_and_forgets_any_other_write(db_url: str) -> None:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    key = ("run", "saver", 1, True)
    row: dict[str, Any] = {"dispatch_id": "d1", "status": "pending", "attempts": 0, "started_at": None, "transactional": True}
    try:
        with engine.connect() as conn:
            step_memo.keep(conn, key, {"agent_name": "a"}, [row])  # type: ignore[list-item]
            assert step_memo.recall(conn, key) is None  # outside a group commit nothing is kept
            with step_memo.shared(conn):
                step_memo.keep(conn, key, {"agent_name": "a"}, [row])  # type: ignore[list-item]
                got = step_memo.recall(conn, key)
                assert got is not None
                got[1][0]["status"] = "changed by the caller"
                again = step_memo.recall(conn, key)
                assert again is not None and again[1][0]["status"] == "pending"  # a copy was handed out
                step_memo.started(conn, "d1", 1, "now", transactional=False)  # type: ignore[arg-type]
                patched = step_memo.recall(conn, key)
                assert patched is not None
                assert {k: patched[1][0][k] for k in ("status", "attempts", "started_at", "transactional")} == {  # type: ignore[literal-required]
                    "status": "running", "attempts": 1, "started_at": "now", "transactional": False,
                }
                step_memo.forget(conn)
                assert step_memo.recall(conn, key) is None
                step_memo.keep(conn, key, {"agent_name": "a"}, [row])  # type: ignore[list-item]
            assert step_memo.recall(conn, key) is None  # gone with the block
            assert row["status"] == "pending"  # the caller's row was never touched
    finally:
        engine.dispose()
