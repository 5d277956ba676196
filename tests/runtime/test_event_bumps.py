"""The session's event counter is bumped once per transaction of a group of writes (``events.one_bump``),
and the events keep the numbers they would have had: dense, in the order emitted, the counter at the
last one. A group commit's gates and results each bumped the session row on their own before (a new
row version and its WAL per write, on the run's hottest row).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ToolCallPart

import helix_dbos as hx
from helix_dbos.ledger import events
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from tests.runtime.test_core_run import scripted


def lookup(ctx: hx.ToolContext, key: str) -> str:
    """Look a key up."""
    return key.upper()


def _three_calls_twice() -> Any:
    calls = [[ToolCallPart("lookup", {"key": f"{s}{i}"}, f"c{s}{i}") for i in range(3)] for s in "ab"]
    return scripted(*calls, "done")


def _seqs(conn: sa.Connection, session_id: str) -> tuple[list[tuple[int, str, Any]], int]:
    e = t.events.c
    rows = [(r.seq, r.type, r.data) for r in conn.execute(sa.select(e.seq, e.type, e.data).where(e.session_id == session_id).order_by(e.seq))]
    counter = conn.execute(sa.select(t.sessions.c.event_seq).where(t.sessions.c.session_id == session_id)).scalar_one()
    return rows, int(counter)


def test_a_run_of_parallel_calls_numbers_its_events_densely_with_one_bump_per_transaction(make_runtime: Any, db_url: str) -> None:
    model, _ = _three_calls_twice()
    rt = make_runtime([hx.Agent("looker", model, tools=[hx.tool(replay="safe")(lookup)])])
    assert rt._launched is not None and rt._launched.runner is not None
    engine = rt._launched.runner.registry.env.tx_engine
    # Postgres: per transaction, the statements that bump a session's counter and the attempts opened
    bumps: dict[int, int] = defaultdict(int)
    gates: dict[int, int] = defaultdict(int)
    per_tx: list[tuple[int, int]] = []

    def seen(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        key = id(conn.connection.dbapi_connection)
        bumps[key] += statement.count("UPDATE helix.sessions SET event_seq")
        gates[key] += statement.count("INSERT INTO helix.attempts")

    def ended(conn: sa.Connection) -> None:
        key = id(conn.connection.dbapi_connection)
        per_tx.append((bumps.pop(key, 0), gates.pop(key, 0)))

    sa.event.listen(engine, "before_cursor_execute", seen)
    sa.event.listen(engine, "commit", ended)
    try:
        handle = rt.start("looker", "look six keys up")
        assert handle.result(timeout=120).status == "completed"
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
        sa.event.remove(engine, "commit", ended)
    check = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with check.connect() as conn:
            rows, counter = _seqs(conn, handle.session_id)
    finally:
        check.dispose()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)) and counter == len(rows)
    kinds = [r[1] for r in rows]
    assert kinds.count("tool_start") == 6 and kinds.count("tool_end") == 6
    starts = {r[2]["dispatch_id"]: r[0] for r in rows if r[1] == "tool_start"}
    ends = {r[2]["dispatch_id"]: r[0] for r in rows if r[1] == "tool_end"}
    assert starts.keys() == ends.keys() and all(starts[d] < ends[d] for d in starts)
    if not is_sqlite(db_url):  # SQLite bumps by trigger, under its one write lock
        assert any(g >= 2 for _, g in per_tx), per_tx  # a group of gates formed
        assert all(b <= 1 for b, _ in per_tx), per_tx


def test_events_held_in_a_block_are_numbered_as_emitted(make_runtime: Any, db_url: str) -> None:
    model, _ = scripted("hello")
    rt = make_runtime([hx.Agent("plain", model)])
    handle = rt.start("plain", "hi")
    assert handle.result(timeout=120).status == "completed"
    sid = handle.session_id
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    postgres = not is_sqlite(db_url)
    updated = "SELECT pg_stat_get_xact_tuples_updated('helix.sessions'::regclass)"
    try:
        with engine.connect() as conn:
            before, counter = _seqs(conn, sid)
        assert counter == len(before)
        with engine.begin() as conn:
            with events.one_bump(conn):
                assert events.emit(conn, sid, None, "probe", {"n": 1}) is (None if postgres else before[-1][0] + 1)
                events.emit_many(conn, sid, None, [("probe", {"n": 2}), ("probe", {"n": 3})])
                events.emit(conn, sid, None, "probe", {"n": 4})
            if postgres:
                assert conn.execute(sa.text(updated)).scalar_one() == 1
        with engine.begin() as conn:  # outside a block: one bump per emit, as before
            events.emit(conn, sid, None, "probe", {"n": 5})
            events.emit(conn, sid, None, "probe", {"n": 6})
            if postgres:
                assert conn.execute(sa.text(updated)).scalar_one() == 2
        with pytest.raises(RuntimeError), engine.begin() as conn, events.one_bump(conn):
            events.emit(conn, sid, None, "probe", {"n": 7})
            raise RuntimeError("rolled back: nothing of the block is appended")
        with engine.connect() as conn:
            after, counter = _seqs(conn, sid)
        probes = after[len(before):]
        assert [r[0] for r in after] == list(range(1, len(after) + 1)) and counter == len(after)
        assert [(r[1], r[2]["n"]) for r in probes] == [("probe", n) for n in range(1, 7)]
        with engine.connect() as conn:
            assert not events.holding(conn)
    finally:
        engine.dispose()
