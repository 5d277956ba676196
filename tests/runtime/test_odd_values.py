"""Values no store or model layer takes as they are never fail a run, on both databases.

A lone surrogate cannot be encoded as UTF-8 (so no provider request and no pydantic JSON can hold
it) and Postgres's ``json``/``jsonb`` refuse ``NaN`` and the infinities. Whatever a tool, a check or a
model produces still reaches the store losslessly and reaches the model as something it can read,
and the run completes. The model here is a ``FunctionModel`` that gives no usage, so pydantic-ai
JSON-encodes every request it is sent, as a provider client encodes its request.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.messages import ModelMessage, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import helix_dbos as hx

SURROGATE = "lone:\ud800 low:\udfff nul:\x00"
NON_FINITE = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "nested": [math.nan, {"x": math.inf}]}


def _same(a: Any, b: Any) -> bool:
    """Equality in which NaN equals NaN (a lossless round trip keeps NaN, which never equals itself)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


class Script:
    """A model that calls ``calls`` in its first reply, then records what it read and ends."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls
        self.read: list[Any] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # what a provider client does with the request: pydantic-ai's messages as JSON (FunctionModel's
        # own usage estimate does the same for every request it gets without usage)
        ModelMessagesTypeAdapter.dump_json(messages)
        if not any(isinstance(m, ModelResponse) for m in messages):
            # usage given: this reply's own arguments may hold what a model may produce (a JSON "\ud800")
            calls = [ToolCallPart(name, args, tool_call_id=f"c{i}") for i, (name, args) in enumerate(self.calls)]
            return ModelResponse(parts=calls, usage=RequestUsage(input_tokens=1, output_tokens=1))
        self.read = [p for p in messages[-1].parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]
        return ModelResponse(parts=[TextPart("done")])


def _tools() -> list[hx.Tool]:
    @hx.tool(replay="safe")
    async def echo(text: str) -> dict[str, Any]:
        """Echo the text back in a dict result (its key too)."""
        return {"echo": text, text: 1}

    @hx.tool(replay="safe")
    async def fail(text: str) -> str:
        """Fail with the text in the error."""
        raise ValueError(f"refused {text}")

    @hx.tool(replay="safe")
    async def measure() -> dict[str, Any]:
        """A measurement that is not a finite number."""
        return dict(NON_FINITE)

    return [echo, fail, measure]


@pytest.mark.parametrize("which", ["args_and_dict_result", "tool_error", "non_finite_result"])
def test_an_odd_value_never_fails_the_run(db_url: str, make_runtime: Any, which: str) -> None:
    calls = {
        "args_and_dict_result": [("echo", {"text": SURROGATE}), ("echo", json.dumps({"text": SURROGATE}))],
        "tool_error": [("fail", {"text": SURROGATE})],
        "non_finite_result": [("measure", {})],
    }[which]
    script = Script(calls)
    rt = make_runtime([hx.Agent("odd", FunctionModel(script), tools=_tools())])
    result = rt.start("odd", "go").result(timeout=90)
    assert (result.status, result.error_code) == ("completed", None), result
    view = rt.session(result.session_id)
    assert len(script.read) == len(calls)  # the model was asked again, and read an answer for every call
    if which == "args_and_dict_result":
        for call in view.calls:  # stored losslessly: the very string, in args and in the result
            assert call.status == "ok" and call.args == {"text": SURROGATE}
            assert call.result == {"echo": SURROGATE, SURROGATE: 1}
        assert all("\ud800" not in str(p.content) for p in script.read)  # what the model read encodes
        assert all("d800" in str(p.content) for p in script.read)  # and still says which character it was
    elif which == "tool_error":
        [call] = view.calls
        assert call.status == "error" and call.error is not None and call.error["message"] == f"refused {SURROGATE}"
    else:
        [call] = view.calls
        assert call.status == "ok" and _same(call.result, NON_FINITE)  # NaN and the infinities come back as they went in


def test_an_approval_tools_odd_args_never_fail_the_run(db_url: str, make_runtime: Any) -> None:
    @hx.tool(requires_approval=True)
    async def wire(note: str) -> dict[str, Any]:
        """Wire money with a note."""
        return {"sent": note}

    script = Script([("wire", {"note": SURROGATE})])
    rt = make_runtime([hx.Agent("odd", FunctionModel(script), tools=[wire])])
    waiting = rt.start("odd", "go").result(timeout=90)
    assert waiting.status == "suspended_client_tool", waiting
    [call] = rt.session(waiting.session_id).calls
    assert call.args == {"note": SURROGATE}
    rt.approve(waiting.session_id, call.dispatch_id, approved=True, reason="ok")
    done = rt.wait(waiting.session_id, timeout=90)
    assert (done.status, done.error_code) == ("completed", None), done
    [call] = rt.session(waiting.session_id).calls
    assert call.status == "ok" and call.result == {"sent": SURROGATE}


def test_a_check_that_answers_non_finite_numbers_never_fails_the_run(db_url: str, make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's ``Applied`` holds NaN and infinities: stored as they are, asked once, the call ok."""
    asked: list[str] = []

    def check(ctx: hx.CheckContext) -> hx.Applied:
        asked.append(ctx.dispatch_id)
        return hx.Applied(dict(NON_FINITE))

    @hx.tool(reconcile=check)
    async def pay(ctx: hx.ToolContext, amount: int) -> dict[str, Any]:
        """Pay an amount."""
        return {"paid": amount}

    script = Script([("pay", {"amount": 5})])
    rt = make_runtime([hx.Agent("odd", FunctionModel(script), tools=[pay])])
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "before_body:pay")  # the run fails after the attempt: the check answers the call
    failed = rt.start("odd", "go").result(timeout=90)
    assert (failed.status, failed.error_code) == ("failed", "injected_fault"), failed
    [call] = rt.session(failed.session_id).calls
    assert (call.status, call.decided_by) == ("ok", "check") and _same(call.result, NON_FINITE)
    assert len(asked) == 1
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")
    done = rt.retry(failed.session_id).result(timeout=90)
    assert done.status == "completed" and len(asked) == 1
