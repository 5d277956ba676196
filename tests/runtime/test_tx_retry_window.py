"""The store retry window starts when a failure is first seen, not when a transactional try began.

A transactional try holds the body (and its wait for its turn), which may well last longer than
``store_retry_window``: a connection cut at the end of such a body used to find its window already
spent (counted from the try's start) and failed the run ``store_unavailable`` without one retry.
"""

from __future__ import annotations

import time

import psycopg.errors as pe
import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import StoreUnavailableError
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.runtime.floor.store_retry import Backoff
from tests.runtime.test_store_retry import wrapped


def test_a_backoff_without_a_start_counts_its_window_from_the_first_failure() -> None:
    exc = wrapped(pe.AdminShutdown("terminating connection due to administrator command"))
    long_ago = time.monotonic() - 10
    with pytest.raises(StoreUnavailableError):  # a try that began a window ago: silence counts from its start
        Backoff("a bounded try", window=1).next_delay(exc, long_ago)
    backoff = Backoff("a transactional try", window=1)
    first = backoff.next_delay(exc)  # no start given: the window opens now
    assert 0 < first <= 1
    assert backoff.deadline is not None and backoff.deadline - time.monotonic() > 0.5


def test_a_connection_cut_after_a_long_transactional_body_is_retried(pg_url: str) -> None:
    window = 1.0
    tries: list[int] = []

    def book(ctx: hx.ToolContext, key: str) -> str:
        """Book a slot."""
        conn = ctx.require_connection()
        tries.append(ctx.attempt)
        if len(tries) == 1:
            time.sleep(window * 2)  # a body longer than the window
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            admin = create_sync_engine(pg_url, poolclass=sa.pool.NullPool)  # a body may not signal a backend: an operator does
            with admin.connect() as other:
                other.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})  # the server drops the body's connection
            admin.dispose()
            conn.execute(sa.text("SELECT 1"))
        return f"booked {key}"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("book", {"key": "k"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("booked")])

    agent = hx.Agent("booker", FunctionModel(reply), tools=[hx.tool(transactional=True, name="book")(book)])
    rt = hx.Runtime([agent], database_url=pg_url, executor_id="tx-window", store_retry_window=window).launch()
    try:
        result = rt.start("booker", "book").result(timeout=60)
        assert (result.status, result.error_code) == ("completed", None), result
        [call] = rt.session(result.session_id).calls
        assert (call.status, call.result, len(call.attempts)) == ("ok", "booked k", 1), call
        assert tries == [1, 1]  # the same attempt's transaction, tried again after the cut
    finally:
        rt.shutdown()
