"""An entry into a session whose run is live and alive is refused from a plain read, before the
session's lock: 200 racing starts of one session no longer queue 200 write transactions (on SQLite
the file's one write lock) only to be told ``session_running``. Proven by holding that lock from
outside the runtime: the refusal still comes at once (the locked path waited the lock out)."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import AgentAlreadyRunningError
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite, sqlite_path
from tests.support.waiting import wait_for


def test_an_entry_into_a_running_session_is_refused_without_waiting_for_its_lock(make_runtime: Any, db_url: str) -> None:
    release = threading.Event()

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        release.wait(60)
        return ModelResponse(parts=[TextPart("hello")])

    rt = make_runtime([hx.Agent("busy", FunctionModel(reply))])
    handle = rt.start("busy", "hi")
    wait_for("the run to be running", lambda: rt.session(handle.session_id).status == "running")
    try:
        if is_sqlite(db_url):  # the file's write lock, held by another connection
            path = sqlite_path(db_url)
            assert path is not None
            holder = sqlite3.connect(path, timeout=1, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            ends = holder.rollback
        else:  # the session's row lock, held by another transaction
            engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
            conn = engine.connect()
            conn.execute(sa.text("SELECT 1 FROM helix.sessions WHERE session_id = :s FOR UPDATE"), {"s": handle.session_id})

            def ends() -> None:
                conn.rollback()
                conn.close()
                engine.dispose()

        try:
            began = time.monotonic()
            with pytest.raises(AgentAlreadyRunningError) as refused:
                rt.start("busy", "again", session_id=handle.session_id)
            assert time.monotonic() - began < 10, "the refusal waited for the session's lock"
            assert refused.value.code == "session_running" and refused.value.detail == {"run_id": handle.run_id}
        finally:
            ends()
    finally:
        release.set()
    assert handle.result(timeout=60).status == "completed"
