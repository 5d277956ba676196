"""Reads that ride on a run's own transactions (``runtime/floor/handoff.py``), on both databases.

A caller waiting on a run started in this process gets the result the run's last transaction read
(no read of its own), and it is exactly what the ledger holds: completed with output and usage,
suspended with its pending call, failed with its code. A second wait reads the ledger. The entry's
prepare reads the first model request's transcript in its own transaction: each new turn of a
session still shows the model the whole conversation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pydantic
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from sqlalchemy import event

import helix_dbos as hx


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[str]]:
    """Statements this thread sends on ``engine`` inside the block."""
    seen: list[str] = []
    me = threading.get_ident()

    def on_execute(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if threading.get_ident() == me:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


class Question(pydantic.BaseModel):
    text: str


def _model(prompts: list[list[str]]) -> FunctionModel:
    """Text answers carrying usage; "ask" calls the client tool, "boom" fails the request."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        said = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
        prompts.append([str(s) for s in said])
        last = said[-1]
        if last == "boom":
            raise ValueError("the model broke")
        if last == "ask" and not any(isinstance(m, ModelResponse) and any(isinstance(p, ToolCallPart) for p in m.parts) for m in messages):
            return ModelResponse(parts=[ToolCallPart("ask_user", {"text": "which?"}, "c1")], usage=RequestUsage(input_tokens=3, output_tokens=2))
        return ModelResponse(parts=[TextPart(f"heard {len(said)}")], usage=RequestUsage(input_tokens=7, output_tokens=5))

    return FunctionModel(reply)


def test_the_waiter_gets_the_ledgers_result_without_reading(make_runtime: Callable[..., hx.Runtime]) -> None:
    prompts: list[list[str]] = []
    ask_user = hx.client_tool(name="ask_user", description="Ask the user.", input_schema=Question)
    rt = make_runtime([hx.Agent("talker", _model(prompts), tools=[ask_user])])
    for message, status in (("hello", "completed"), ("ask", "suspended_client_tool"), ("boom", "failed")):
        handle = rt.start("talker", message)
        assert rt._launched is not None and rt._launched.runner is not None
        with statements(rt.engine) as api, statements(rt._launched.runner.tx_engine) as tx:
            result = handle.result(timeout=60)
        assert result.status == status, result
        assert (api, tx) == ([], []), (api, tx)  # the run's last transaction read it: no read of the wait's own
        assert result == rt.reader.wait_run(handle.run_id, timeout=60)  # what the ledger holds, field by field
        with statements(rt.engine) as again:
            assert handle.result(timeout=60) == result
        assert again, "a second wait reads the ledger (the handoff is taken once)"
    assert result.error_code == "run_error" and "the model broke" in (result.error or "")


def test_each_turn_of_a_session_sees_the_whole_conversation(make_runtime: Callable[..., hx.Runtime]) -> None:
    prompts: list[list[str]] = []
    rt = make_runtime([hx.Agent("talker", _model(prompts))])
    first = rt.start("talker", "one").result(timeout=60)
    second = rt.start("talker", "two", session_id=first.session_id).result(timeout=60)
    third = rt.start("talker", "three", session_id=first.session_id).result(timeout=60)
    assert (first.output, second.output, third.output) == ("heard 1", "heard 2", "heard 3")
    assert prompts == [["one"], ["one", "two"], ["one", "two", "three"]]


def test_a_sleeper_wakes_when_its_key_is_put_and_not_for_another() -> None:
    from helix_dbos.runtime.floor.handoff import Handoff

    box: Handoff[str, int] = Handoff(size=2)
    other = box.sleeper("b")
    mine = box.sleeper("a")
    box.put("b", 0)  # a put of another key: "a"'s sleeper sleeps its whole (short) timeout
    started = threading.Event()

    def later() -> None:
        started.wait()
        box.put("a", 1)

    threading.Thread(target=later, daemon=True).start()
    import time

    t = time.monotonic()
    started.set()
    mine(60.0)  # ends at the put, not after a minute
    assert time.monotonic() - t < 30
    other(0.0)
    assert box.take("a") == 1 and box.take("a") is None  # taken once
    for k in "cde":
        box.put(k, 2)
    assert len(box) == 2 and box.take("b") is None  # bounded: the oldest dropped out


def test_a_session_wait_answers_what_the_ledger_holds(make_runtime: Callable[..., hx.Runtime]) -> None:
    prompts: list[list[str]] = []
    rt = make_runtime([hx.Agent("talker", _model(prompts))])
    handle = rt.start("talker", "hello")
    waited = rt.wait(handle.session_id, timeout=60)
    assert waited.status == "completed" and waited.output == "heard 1"
    assert waited == rt.reader.wait_run(handle.run_id, timeout=60) == handle.result(timeout=60)
