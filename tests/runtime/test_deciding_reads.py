"""A read that decides a write holds what it read until its transaction ends, on both databases.

Every read-decide-write transaction of the ledger marks its deciding reads ``FOR UPDATE``. Postgres
locks the rows. SQLite renders no ``FOR UPDATE``, and pysqlite's ``isolation_level = "IMMEDIATE"``
begins a transaction only at the first INSERT/UPDATE/DELETE, so those reads used to run outside the
transaction: a stop read a session as live, the worker's completion committed in between, and the
stop recorded a stop of an ended run (found by test_withdraw_race[sqlite] on a loaded machine). The
ledger's SQLite engine now takes the database's write lock before a ``FOR UPDATE`` read
(``ledger/engine.py``). Each reader below is called as the runtime calls it; a second connection's
write to the rows it read must then wait until the reader's transaction ends, and only then land.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ToolCallPart
from sqlalchemy.engine import make_url

import helix_dbos as hx
from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import fence_reads
from helix_dbos.ledger import sessions as session_rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.runtime.floor import fence
from tests.runtime.test_core_run import scripted

Ids = dict[str, Any]

READERS: dict[str, tuple[Callable[[sa.Connection, Ids], Any], str]] = {
    "sessions.get_session": (lambda c, i: session_rows.get_session(c, i["session_id"], for_update=True), "sessions"),
    "calls.get_call": (lambda c, i: call_rows.get_call(c, i["dispatch_id"], for_update=True), "calls"),
    "calls.of_step": (lambda c, i: call_rows.of_step(c, i["run_id"], i["step"], for_update=True), "calls"),
    "fence_reads.fence_row": (lambda c, i: fence_reads.fence_row(c, i["run_id"], fence.STATUS_OF), "sessions"),
    "fence_reads.calls_beside_fence": (lambda c, i: fence_reads.calls_beside_fence(c, i["run_id"], i["run_id"], i["step"], fence.STATUS_OF), "sessions"),
}
#: The row each reader locks on Postgres, and the statement that writes it (SQLite: any write waits).
WRITES = {
    "sessions": ("UPDATE {s}sessions SET updated_at = updated_at WHERE session_id = {p}", "session_id"),
    "calls": ("UPDATE {s}calls SET attempts = attempts WHERE dispatch_id = {p}", "dispatch_id"),
}


def _other_write(url: str, ids: Ids, table: str = "sessions", *, wait: float = 60.0) -> str:
    """Another connection's write to one row of ``table``, refused if the row (or SQLite's write
    lock) stays held for ``wait`` seconds. A write expected to land waits generously (the launched
    runtime's own background writes may hold SQLite's lock a moment on a busy machine); one expected
    to be refused waits briefly, since the reader holds its lock until the test ends it."""
    sql, key = WRITES[table]
    if is_sqlite(url):
        con = sqlite3.connect(str(make_url(url).database), timeout=wait)
        try:
            con.execute(sql.format(s="", p="?"), (ids[key],))
            con.commit()
            return "written"
        except sqlite3.OperationalError as exc:
            return f"refused: {exc}"
        finally:
            con.close()
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True) as pg:
        try:
            pg.execute(f"SET lock_timeout = '{int(wait * 1000)}ms'")
            pg.execute(sql.format(s="helix.", p="%s"), (ids[key],))
            return "written"
        except psycopg.errors.LockNotAvailable as exc:
            return f"refused: {exc}"


@pytest.fixture
def ended_run(make_runtime: Any, db_url: str) -> Ids:
    def note(ctx: hx.ToolContext, text: str) -> str:
        """Note something."""
        return text

    model, _ = scripted([ToolCallPart("note", {"text": "a"}, "c1")], "done")
    rt = make_runtime([hx.Agent("noter", model, tools=[hx.tool(replay="safe")(note)])])
    result = rt.start("noter", "note a").result(timeout=120)
    assert result.status == "completed"
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            c = t.calls.c
            row = conn.execute(sa.select(c.session_id, c.run_id, c.dispatch_id, c.step)).mappings().one()
    finally:
        engine.dispose()
    return dict(row)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_deciding_read_holds_its_rows_until_the_transaction_ends(ended_run: Ids, db_url: str, reader: str) -> None:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        read, table = READERS[reader]
        assert _other_write(db_url, ended_run, table) == "written"
        with engine.begin() as conn:
            assert read(conn, ended_run), f"{reader} read nothing"
            held = _other_write(db_url, ended_run, table, wait=0.3)
        assert held.startswith("refused"), f"{reader}: another connection wrote the row it read inside the open transaction ({held})"
        assert _other_write(db_url, ended_run, table) == "written", "the lock outlived the transaction"
    finally:
        engine.dispose()


def test_a_plain_read_takes_no_lock(ended_run: Ids, db_url: str) -> None:
    """Readers (waiters, the API, /ui) must not queue behind a transactional body's write lock."""
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            assert session_rows.get_session(conn, ended_run["session_id"]) is not None
            assert _other_write(db_url, ended_run) == "written"
    finally:
        engine.dispose()
