"""A step's result writes in one statement (``gate.record_together``, ``attempts.record_results_fenced``),
on a real database.

The group commit already ran a step's results in one transaction; on Postgres they are now one
statement too. What must not change is what each write does: its own conditions (its attempt, the
call still running, the run owning its session), the values stored exactly as the write alone
stores them, its ``tool_end`` event in order, and a write the statement did not make taking its own
path. SQLite keeps one write a result (it has no writable CTEs): the same ledger, more statements.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ToolCallPart

import helix_dbos as hx
from helix_dbos.ledger import events
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.attempts import ResultWrite, record_result_fenced, record_results_fenced
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.runtime.floor.durable import Tries
from helix_dbos.runtime.floor.gate import ResultItem, record_together
from tests.runtime.test_core_run import scripted

#: What a tool may hand back that the ledger must keep exactly: a lone surrogate, a NUL, JSON's null.
AWKWARD = {"text": "lone \ud800 half, nul \x00 and \u2028", "none": None, "nested": [{"k\ud800": 1.5}]}


def echo(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """Hand back an awkward value named by ``key``."""
    return {"key": key, **AWKWARD}


def _is_shared_results(statement: str) -> bool:
    return re.search(r"UPDATE helix\.calls SET status=given\.status", statement) is not None


def _is_one_result(statement: str) -> bool:
    """A result write of one call: Postgres's fenced CTE, SQLite's fenced UPDATE."""
    return re.search(r"UPDATE (?:helix|main)\.calls SET status=%\(p_status\)s|UPDATE (?:helix|main)\.calls SET status=\?", statement) is not None


def test_a_steps_results_share_one_statement_and_store_what_each_write_alone_stores(make_runtime: Any, db_url: str) -> None:
    """Three calls in one step, then one alone: on Postgres the three results are one statement
    (SQLite: one each); every call reads back what its tool returned, the raw columns of a result
    written together are those of the one written alone, and the events run without a gap."""
    model, _ = scripted([ToolCallPart("echo", {"key": f"k{i}"}, f"c{i}") for i in range(3)], [ToolCallPart("echo", {"key": "alone"}, "c9")], "done")
    rt = make_runtime([hx.Agent("echoer", model, tools=[hx.tool(replay="safe")(echo)])])
    assert rt._launched is not None and rt._launched.runner is not None
    engine = rt._launched.runner.registry.env.tx_engine
    open_tx: dict[int, list[str]] = defaultdict(list)
    done: list[list[str]] = []

    def seen(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        open_tx[id(conn.connection.dbapi_connection)].append(statement)

    def ended(conn: sa.Connection) -> None:
        done.append(open_tx.pop(id(conn.connection.dbapi_connection), []))

    sa.event.listen(engine, "before_cursor_execute", seen)
    sa.event.listen(engine, "commit", ended)
    try:
        handle = rt.start("echoer", "echo four keys")
        result = handle.result(timeout=120)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
        sa.event.remove(engine, "commit", ended)
    assert result.status == "completed" and result.output == "done", result

    shared = [tx for tx in done if any(_is_shared_results(s) for s in tx)]
    singles = sum(_is_one_result(s) for tx in done for s in tx)
    if is_sqlite(db_url):
        assert shared == [] and singles == 4, done
    else:
        assert len(shared) == 1, done  # the step's three results: one statement, no single write beside it
        assert sum(_is_shared_results(s) for s in shared[0]) == 1 and not any(_is_one_result(s) for s in shared[0]), shared[0]
        assert singles == 1, done  # the call alone in its step: its own statement, as ever

    check = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with check.connect() as conn:
            c = t.calls.c
            rows = conn.execute(sa.select(c.tool_call_id, c.status, c.attempts, c.paired_by, c.result).where(c.session_id == handle.session_id)).all()
            raw = dict(conn.execute(sa.text(
                "SELECT tool_call_id, CAST(error AS TEXT) FROM " + ("" if is_sqlite(db_url) else "helix.") + "calls WHERE session_id = :s"
            ), {"s": handle.session_id}).all())
            ends = conn.execute(sa.select(t.attempts.c.outcome).join(t.calls, t.calls.c.dispatch_id == t.attempts.c.dispatch_id)
                                .where(c.session_id == handle.session_id)).scalars().all()
            seqs = conn.execute(sa.select(t.events.c.seq, t.events.c.type, t.events.c.data).where(t.events.c.session_id == handle.session_id)
                                .order_by(t.events.c.seq)).all()
    finally:
        check.dispose()
    assert sorted((r.tool_call_id, r.status, r.attempts, r.paired_by, r.result) for r in rows) == sorted(
        (cid, "ok", 1, "body", {"key": key, **AWKWARD}) for cid, key in [("c0", "k0"), ("c1", "k1"), ("c2", "k2"), ("c9", "alone")]
    )
    assert raw["c0"] == raw["c1"] == raw["c2"] == raw["c9"], raw  # the error column as the lone write stores it
    assert ends == ["ok"] * 4
    assert [s for s, _, _ in seqs] == list(range(1, len(seqs) + 1))  # no gap, no repeat
    tool_ends = [d for _, kind, d in seqs if kind == "tool_end"]
    assert sorted(d["dispatch_id"] for d in tool_ends) == sorted(_dispatch_ids(db_url, handle.session_id))
    assert all(d["result"] == {"key": d["result"]["key"], **AWKWARD} and d["status"] == "ok" and d["attempt"] == 1 for d in tool_ends)


def _dispatch_ids(db_url: str, session_id: str) -> list[str]:
    check = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with check.connect() as conn:
            return list(conn.execute(sa.select(t.calls.c.dispatch_id).where(t.calls.c.session_id == session_id)).scalars())
    finally:
        check.dispose()


# --- the statement's own conditions, on rows laid out by hand --------------------------------------


def _ledger(conn: sa.Connection, owner_run: str, run: str, calls: dict[str, tuple[str, int]]) -> str:
    """A session whose current run is ``owner_run``, run ``run`` running in it, and ``calls`` of it
    (dispatch id -> (status, attempts)), each with its attempts opened."""
    now = datetime.now(UTC)
    sid = uuid.uuid4().hex
    conn.execute(t.sessions.insert().values(session_id=sid, agent_name="a", status="running", current_run_id=owner_run, created_at=now, updated_at=now))
    for seq, rid in enumerate(dict.fromkeys([run, owner_run]), start=1):
        conn.execute(t.runs.insert().values(run_id=rid, session_id=sid, seq=seq, agent_name="a", entry="start", status="running", max_steps=9, created_at=now))
    for pos, (did, (status, attempts)) in enumerate(calls.items()):
        conn.execute(t.calls.insert().values(dispatch_id=did, session_id=sid, run_id=run, checkpoint_id=f"cp-{sid}", step=0, position=pos,
                                             tool_call_id=did, tool_name="echo", kind="function", replay="safe", status=status, attempts=attempts,
                                             created_at=now))
        for n in range(1, attempts + 1):
            conn.execute(t.attempts.insert().values(dispatch_id=did, attempt=n, run_id=run, started_at=now))
    return sid


def _ids() -> list[str]:
    return [uuid.uuid4().hex for _ in range(4)]


@pytest.fixture
def engine(db_url: str) -> Any:
    e = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    yield e
    e.dispose()


def test_the_shared_statement_writes_only_what_each_rows_conditions_allow(engine: sa.Engine, db_url: str) -> None:
    """Four writes: two as expected, one whose call has moved to a newer attempt, one whose call is
    already answered. The statement writes the two, in order of their events, and leaves the other
    two exactly as they were (attempt still open: its own path closes it, saying why)."""
    run = uuid.uuid4().hex
    d = _ids()
    with engine.begin() as conn:
        sid = _ledger(conn, run, run, {d[0]: ("running", 1), d[1]: ("running", 1), d[2]: ("running", 2), d[3]: ("ok", 1)})
    writes = [ResultWrite(x, 1, "ok", "echo", {"n": i, **AWKWARD}, None) for i, x in enumerate(d)]
    if is_sqlite(db_url):
        with engine.begin() as conn, events.one_bump(conn), pytest.raises(RuntimeError, match="Postgres"):
            record_results_fenced(conn, run, writes)
        items = [ResultItem(run, w.dispatch_id, 1, "ok", w.result, None, Tries(), "echo") for w in writes]
        with engine.begin() as conn, events.one_bump(conn):
            assert record_together(conn, items) == [None] * 4  # each takes its own path
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(t.calls).where(t.calls.c.paired_by.is_not(None))).scalar_one() == 0
        return
    with engine.begin() as conn, events.one_bump(conn):
        assert record_results_fenced(conn, run, [writes[1], writes[2], writes[0], writes[3]]) == {d[0], d[1]}
    with engine.connect() as conn:
        c = t.calls.c
        calls = {r.dispatch_id: r for r in conn.execute(sa.select(c.dispatch_id, c.status, c.attempts, c.result, c.paired_by, c.settled_run_id)
                                                         .where(c.session_id == sid))}
        opened = {(r.dispatch_id, r.attempt): r.outcome for r in conn.execute(sa.select(t.attempts).join(t.calls).where(c.session_id == sid))}
        evs = conn.execute(sa.select(t.events.c.seq, t.events.c.type, t.events.c.data).where(t.events.c.session_id == sid).order_by(t.events.c.seq)).all()
        counter = conn.execute(sa.select(t.sessions.c.event_seq).where(t.sessions.c.session_id == sid)).scalar_one()
    for i in (0, 1):
        assert (calls[d[i]].status, calls[d[i]].result, calls[d[i]].paired_by, calls[d[i]].settled_run_id) == ("ok", {"n": i, **AWKWARD}, "body", run)
        assert opened[(d[i], 1)] == "ok"
    assert (calls[d[2]].status, calls[d[2]].attempts, calls[d[2]].paired_by) == ("running", 2, None)
    assert opened[(d[2], 1)] is None and opened[(d[2], 2)] is None
    assert (calls[d[3]].status, calls[d[3]].paired_by, opened[(d[3], 1)]) == ("ok", None, None)
    assert [(s, k, e["dispatch_id"]) for s, k, e in evs] == [(1, "tool_end", d[1]), (2, "tool_end", d[0])]  # in the order given
    assert evs[1][2] == {"dispatch_id": d[0], "tool_name": "echo", "attempt": 1, "status": "ok", "result": {"n": 0, **AWKWARD}, "error": None}
    assert counter == 2


def test_the_shared_statement_writes_nothing_for_a_run_that_lost_its_session(engine: sa.Engine, db_url: str) -> None:
    """The run fence is the statement's, for every row: a run that is no longer its session's
    current run writes none of its results (each then takes its own path, which refuses it)."""
    if is_sqlite(db_url):
        pytest.skip("SQLite has no shared statement: each result is its own write (the test above checks SQLite refuses the call)")
    run, newer = uuid.uuid4().hex, uuid.uuid4().hex
    d = _ids()[:2]
    with engine.begin() as conn:
        sid = _ledger(conn, newer, run, {d[0]: ("running", 1), d[1]: ("running", 1)})
    with engine.begin() as conn, events.one_bump(conn):
        assert record_results_fenced(conn, run, [ResultWrite(x, 1, "ok", "echo", 1) for x in d]) == set()
    with engine.connect() as conn:
        assert set(conn.execute(sa.select(t.calls.c.status).where(t.calls.c.session_id == sid)).scalars()) == {"running"}
        assert conn.execute(sa.select(sa.func.count()).select_from(t.events).where(t.events.c.session_id == sid)).scalar_one() == 0


def test_a_result_written_together_is_stored_as_the_same_result_written_alone(engine: sa.Engine, db_url: str) -> None:
    """Byte for byte: the same awkward result and a null error, once through the shared statement and
    once through the single write, leave the same text in the ledger's columns and events."""
    if is_sqlite(db_url):
        pytest.skip("SQLite has no shared statement: the single write is the only one there")
    run, alone_run = uuid.uuid4().hex, uuid.uuid4().hex
    d, lone = _ids()[:2], uuid.uuid4().hex
    with engine.begin() as conn:
        sid = _ledger(conn, run, run, {d[0]: ("running", 1), d[1]: ("running", 1)})
        lone_sid = _ledger(conn, alone_run, alone_run, {lone: ("running", 1)})
    value = {"n": 0, **AWKWARD}
    with engine.begin() as conn, events.one_bump(conn):
        assert record_results_fenced(conn, run, [ResultWrite(d[0], 1, "ok", "echo", value), ResultWrite(d[1], 1, "ok", "echo", value)]) == set(d)
    with engine.begin() as conn, events.one_bump(conn):
        assert record_result_fenced(conn, lone, 1, alone_run, "ok", "echo", result=value)
    raw = "SELECT CAST(result AS TEXT), CAST(error AS TEXT) FROM helix.calls WHERE dispatch_id = :d"
    ev = "SELECT CAST(data AS TEXT) FROM helix.events WHERE session_id = :s ORDER BY seq"
    with engine.connect() as conn:
        together = conn.execute(sa.text(raw), {"d": d[0]}).one()
        alone = conn.execute(sa.text(raw), {"d": lone}).one()
        ev_together = conn.execute(sa.text(ev), {"s": sid}).scalars().first()
        ev_alone = conn.execute(sa.text(ev), {"s": lone_sid}).scalars().first()
    assert tuple(together) == tuple(alone) and together[1] == "null"
    assert ev_together is not None and ev_alone is not None
    assert ev_together.replace(d[0], "D") == ev_alone.replace(lone, "D")
