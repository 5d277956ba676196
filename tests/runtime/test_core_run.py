"""The core loop on both databases: parallel and grouped calls, the ledger rows they leave, bad input."""

from __future__ import annotations

import threading
import time
from typing import Any

import pydantic
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import AgentAlreadyRunningError


class Tracker:
    """Records body start/end times, to prove which calls overlapped."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def tool(self, name: str, *, delay: float = 0.2, **options: Any) -> hx.Tool:
        async def body(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
            import asyncio

            start = time.monotonic()
            await asyncio.sleep(delay)
            with self.lock:
                self.spans[key] = (start, time.monotonic())
            return {"tool": name, "key": key, "attempt": ctx.attempt, "dispatch_id": ctx.dispatch_id}

        body.__name__ = name
        body.__doc__ = f"{name} tool"
        return hx.tool(name=name, **options)(body)

    def overlapped(self, a: str, b: str) -> bool:
        (s1, e1), (s2, e2) = self.spans[a], self.spans[b]
        return s1 < e2 and s2 < e1


def scripted(*steps: list[ToolCallPart] | str) -> tuple[FunctionModel, list[int]]:
    """A model that plays ``steps`` in order (a list of calls, or a final text); counts its requests."""
    asked: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        asked.append(n)
        step = steps[min(n, len(steps) - 1)]
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=list(step))

    return FunctionModel(reply), asked


def test_multi_step_parallel_and_grouped_calls(make_runtime: Any) -> None:
    tr = Tracker()
    tools = [tr.tool("fetch", replay="safe"), tr.tool("book", concurrency_group="venue"), tr.tool("notify", sequential=True)]
    model, asked = scripted(
        [ToolCallPart("fetch", {"key": "f1"}, "c1"), ToolCallPart("fetch", {"key": "f2"}, "c2"),
         ToolCallPart("book", {"key": "b1"}, "c3"), ToolCallPart("book", {"key": "b2"}, "c4")],
        [ToolCallPart("notify", {"key": "n1"}, "c5"), ToolCallPart("notify", {"key": "n2"}, "c6"), ToolCallPart("fetch", {"key": "f3"}, "c7")],
        "all booked",
    )
    rt = make_runtime([hx.Agent("planner", model, tools=tools)])
    result = rt.start("planner", "plan a dinner").result(timeout=60)
    assert result.status == "completed" and result.output == "all booked"
    assert asked == [0, 1, 2]
    # parallel by default; one after another inside a concurrency group and along the sequential chain
    assert tr.overlapped("f1", "f2") and tr.overlapped("f1", "b1")
    assert not tr.overlapped("b1", "b2") and tr.spans["b1"][1] <= tr.spans["b2"][0]
    assert not tr.overlapped("n1", "n2") and tr.spans["n1"][1] <= tr.spans["n2"][0]
    assert tr.overlapped("n1", "f3")

    view = rt.session(result.session_id)
    assert [(c.tool_name, c.status, len(c.attempts), c.step, c.position) for c in view.calls] == [
        ("fetch", "ok", 1, 0, 0), ("fetch", "ok", 1, 0, 1), ("book", "ok", 1, 0, 2), ("book", "ok", 1, 0, 3),
        ("notify", "ok", 1, 1, 0), ("notify", "ok", 1, 1, 1), ("fetch", "ok", 1, 1, 2),
    ]
    assert len({c.dispatch_id for c in view.calls}) == 7
    assert all(c.result["dispatch_id"] == c.dispatch_id for c in view.calls)
    assert [c.replay for c in view.calls[:3]] == ["safe", "safe", "unsafe"]
    # two saved steps (append + step commit each), then the final text's step commit
    assert [(c["kind"], c["step"]) for c in view.checkpoints] == [("append", 0), ("step", 0), ("append", 1), ("step", 1), ("step", 2)]
    kinds = [type(m).__name__ for m in view.messages]
    assert kinds == ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse"]
    answered = [p.tool_call_id for p in view.messages[2].parts if isinstance(p, ToolReturnPart)]
    assert answered == ["c1", "c2", "c3", "c4"]
    assert result.usage.requests == 3 and result.usage.total_tokens > 0


def test_text_only_reply_saves_no_append(make_runtime: Any) -> None:
    model, _ = scripted("hello")
    rt = make_runtime([hx.Agent("greeter", model)])
    result = rt.start("greeter", "hi").result(timeout=120)
    view = rt.session(result.session_id)
    assert result.output == "hello"
    assert [c["kind"] for c in view.checkpoints] == ["step"]
    assert view.calls == []


class Booking(pydantic.BaseModel):
    venue: str
    seats: int


def test_structured_output_runs_siblings_first(make_runtime: Any) -> None:
    tr = Tracker()
    model, asked = scripted(
        "I will just talk",
        [ToolCallPart("fetch", {"key": "x"}, "c1"), ToolCallPart("final_result", {"venue": "Luigi's", "seats": 2}, "c2")],
    )
    rt = make_runtime([hx.Agent("booker", model, tools=[tr.tool("fetch", replay="safe")], output_type=Booking)])
    result = rt.start("booker", "book").result(timeout=120)
    assert result.status == "completed"
    assert result.output == {"venue": "Luigi's", "seats": 2}
    assert "x" in tr.spans  # the sibling ran before the run finished
    assert asked == [0, 1]  # the text reply got a retry prompt, then the model finished


def test_bad_input_goes_back_to_the_model(make_runtime: Any) -> None:
    @hx.tool
    def explode(key: str) -> str:
        """Always fails."""
        raise RuntimeError(f"boom {key}")

    @hx.tool
    def weird(key: str) -> object:
        """Returns something JSON cannot hold."""
        return object()

    seen: list[list[Any]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[
                ToolCallPart("explode", {"key": "a"}, "c1"),
                ToolCallPart("explode", {"nokey": 1}, "c2"),
                ToolCallPart("missing_tool", {}, "c3"),
                ToolCallPart("weird", {"key": "w"}, "c4"),
                ToolCallPart("explode", "{not json", "c5"),
            ])
        seen.append([(p.tool_name, p.outcome, p.content) for p in messages[-1].parts])
        return ModelResponse(parts=[TextPart("recovered")])

    rt = make_runtime([hx.Agent("clumsy", FunctionModel(reply), tools=[explode, weird])])
    result = rt.start("clumsy", "go").result(timeout=120)
    assert result.status == "completed"
    view = rt.session(result.session_id)
    statuses = [(c.tool_name, c.status, len(c.attempts)) for c in view.calls]
    assert statuses == [("explode", "error", 1), ("explode", "error", 0), ("missing_tool", "error", 0), ("weird", "error", 1), ("explode", "error", 0)]
    parts = seen[0]
    assert parts[0][1] != "retried" and "boom a" in str(parts[0][2])
    assert parts[1][1] == "retried" and "key" in parts[1][2]
    assert parts[2][1] == "retried" and "Unknown tool name" in parts[2][2]
    assert "not JSON-serialisable" in str(parts[3][2])
    assert parts[4][1] == "retried" and "not valid JSON" in parts[4][2]


def test_max_steps_fails_typed_and_retry_gets_a_fresh_budget(make_runtime: Any) -> None:
    tr = Tracker()
    loop = [ToolCallPart("fetch", {"key": "again"}, "c")]
    model, asked = scripted(loop, loop, loop, "finally")
    rt = make_runtime([hx.Agent("looper", model, tools=[tr.tool("fetch", replay="safe", delay=0)], max_steps=2)])
    first = rt.start("looper", "go").result(timeout=120)
    assert first.status == "failed" and first.error_code == "max_steps"
    second = rt.retry(first.session_id).result(timeout=120)
    assert second.status == "completed" and second.output == "finally"
    assert asked == [0, 1, 2, 3]


def test_second_entry_into_a_running_session_is_refused(make_runtime: Any) -> None:
    tr = Tracker()
    model, _ = scripted([ToolCallPart("fetch", {"key": "slow"}, "c")], "done")
    rt = make_runtime([hx.Agent("slowpoke", model, tools=[tr.tool("fetch", replay="safe", delay=1.0)])])
    handle = rt.start("slowpoke", "go")
    with pytest.raises(AgentAlreadyRunningError) as err:
        rt.start("slowpoke", "again", session_id=handle.session_id)
    assert err.value.code == "session_running"
    with pytest.raises(AgentAlreadyRunningError):
        rt.resume(handle.session_id)
    assert handle.result(timeout=120).status == "completed"
    assert len(rt.session(handle.session_id).runs) == 1
