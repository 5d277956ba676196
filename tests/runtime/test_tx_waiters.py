"""Transactional bodies waiting for their turn do not starve the API pool.

Every transactional body of a database runs one at a time (``flow/transactional.py``: Postgres's
advisory lock, SQLite's write lock). The waiters used to wait holding a connection of the API
engine each, so about twenty of them exhausted its default pool (10 + 10) and the process's entries
and reads waited behind them (up to the pool's 30 s timeout). They now queue in the process before
taking a connection: one connection is held by the body that runs, and entries and reads answer at
once while the others wait their turn. A small pool here makes a few waiters enough.

Postgres only: SQLite's engine pools nothing (each checkout opens a connection), and there a
running transactional body holds the database's write lock, which every entry waits for anyway.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import helix_dbos as hx

BODIES = 8
HOLD = 2.0  # seconds each body holds its turn: the last starts about BODIES * HOLD after the first
API_POOL = (3, 0)


def _agents(started: list[float]) -> list[hx.Agent]:
    def book(ctx: hx.ToolContext, key: str) -> str:
        """Book a slot."""
        started.append(time.monotonic())
        time.sleep(HOLD)
        return key

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("book", {"key": "k"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("booked")])

    booker = hx.Agent("booker", FunctionModel(reply), tools=[hx.tool(transactional=True, name="book")(book)])
    return [booker, hx.Agent("chat", TestModel(call_tools=[]))]


def _until(cond: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_reads_and_entries_answer_while_transactional_bodies_queue(pg_url: str) -> None:
    started: list[float] = []
    rt = hx.Runtime(_agents(started), database_url=pg_url, executor_id="tx-waiters", api_pool=API_POOL)
    rt.launch()
    try:
        handles = [rt.start("booker", f"book {i}") for i in range(BODIES)]
        _until(lambda: len(started) >= 2, "the transactional bodies to queue")
        held: list[int] = []
        took: list[float] = []
        for h in handles[:4]:
            held.append(rt.engine.pool.checkedout())  # type: ignore[union-attr]
            t0 = time.monotonic()
            rt.session(h.session_id)  # a read: one API connection
            took.append(time.monotonic() - t0)
        t0 = time.monotonic()
        rt.start("chat", "hello").result(timeout=60)  # an entry, and its whole run
        took.append(time.monotonic() - t0)
        assert len(started) < BODIES, "the bodies were done before the probes: the test proves nothing"
        # the body that runs holds one; the waiters hold none (before: the whole pool, all the time).
        # A sample may catch another run's short transaction beside it, so the least one is the measure.
        assert min(held) <= 1 and max(held) < API_POOL[0], held
        assert max(took) < HOLD, took  # before: each waited for a body to end and give its connection back
        results: list[Any] = [h.result(timeout=BODIES * HOLD + 120) for h in handles]
        assert {r.status for r in results} == {"completed"}
        assert len(started) == BODIES
    finally:
        rt.shutdown()
