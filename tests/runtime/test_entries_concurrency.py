"""The run-start gate under real concurrency, the dbos_compat profile, and entry validation."""

from __future__ import annotations

import threading
from typing import Any

import pydantic
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    CheckpointNotFoundError,
    NothingToResumeError,
    SessionNotFoundError,
    ValidationError,
)


def _model(calls: list[ToolCallPart]) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0 and calls:
            return ModelResponse(parts=list(calls))
        return ModelResponse(parts=[TextPart("ok")])

    return FunctionModel(reply)


@hx.tool(replay="safe")
async def nap(ctx: hx.ToolContext, seconds: float) -> str:
    """Sleep a while."""
    import asyncio

    await asyncio.sleep(seconds)
    return "rested"


def test_concurrent_entries_exactly_one_wins(make_runtime: Any) -> None:
    """Eight entries race for one session; the winner's run holds in its body until every entry has
    answered, so each of the others finds it live (entries that read after a commit are serialized
    on both databases, and a turn that had already ended would rightly admit the next one)."""
    release = threading.Event()

    @hx.tool(replay="safe", name="hold")
    async def hold(ctx: hx.ToolContext) -> str:
        """Hold until the test lets go."""
        import asyncio

        await asyncio.to_thread(release.wait, 300)
        return "held"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", [])):
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("hold", {}, "h")])  # every turn's first request

    rt = make_runtime([hx.Agent("holder", FunctionModel(reply), tools=[hold])])
    release.set()
    sid = rt.start("holder", "first").result(timeout=120).session_id
    release.clear()
    barrier = threading.Barrier(8)
    won: list[hx.RunHandle] = []
    refused: list[Exception] = []
    lock = threading.Lock()

    def enter(i: int) -> None:
        barrier.wait()
        try:
            handle = rt.start("holder", f"turn {i}", session_id=sid)
            with lock:
                won.append(handle)
        except AgentAlreadyRunningError as exc:
            with lock:
                refused.append(exc)

    threads = [threading.Thread(target=enter, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    release.set()
    assert len(won) == 1 and len(refused) == 7
    assert all(e.code == "session_running" for e in refused)
    assert won[0].result(timeout=120).status == "completed"
    assert [r["status"] for r in rt.session(sid).runs] == ["completed", "completed"]


def test_entries_refuse_bad_input_and_change_nothing(make_runtime: Any) -> None:
    rt = make_runtime([hx.Agent("napper", _model([]), tools=[nap])])
    sid = rt.start("napper", "hi").result(timeout=120).session_id
    before = rt.session(sid)
    with pytest.raises(ValidationError):
        rt.retry(sid, checkpoint_id="cp-whatever")  # a checkpoint retry needs a message
    with pytest.raises(CheckpointNotFoundError):
        rt.retry(sid, checkpoint_id="cp-nope", message="m")
    with pytest.raises(SessionNotFoundError):
        rt.resume("no-such-session")
    with pytest.raises(NothingToResumeError):
        rt.resume(sid)  # completed: nothing to resume
    with pytest.raises(NothingToResumeError):
        rt.retry(sid)  # retry follows a failed or interrupted run
    with pytest.raises(ValidationError):
        rt.resume(sid, mode="with_message")
    with pytest.raises(hx.HelixError) as err:
        rt.start("nobody", "hi")
    assert err.value.code == "unknown_agent"
    after = rt.session(sid)
    assert (after.runs, after.checkpoints, len(after.messages)) == (before.runs, before.checkpoints, len(before.messages))


def test_dbos_compat_sets_no_dispatch_id(make_runtime: Any) -> None:
    seen: list[Any] = []

    @hx.tool
    def keyed(ctx: hx.ToolContext, x: int) -> str:
        """Needs a dedupe key."""
        seen.append(ctx.dispatch_id)
        return ctx.require_dispatch_id()

    rt = make_runtime([hx.Agent("compat", _model([ToolCallPart("keyed", {"x": 1}, "c")]), tools=[keyed])], recovery="dbos_compat")
    result = rt.start("compat", "go").result(timeout=120)
    call = rt.session(result.session_id).calls[0]
    assert seen == [None]
    assert call.status == "error" and call.error["type"] == "DispatchIdUnavailableError"
    assert "dbos_compat" in call.error["message"]


class Pick(pydantic.BaseModel):
    option: str


def _suspending_agent() -> hx.Agent:
    pick = hx.client_tool(name="pick", description="Let the user pick.", input_schema=Pick)
    return hx.Agent("picker", _model([ToolCallPart("nap", {"seconds": 0}, "c1"), ToolCallPart("pick", {"option": "a"}, "c2")]), tools=[nap, pick])


def test_answers_reach_a_step_recovered_from_its_checkpoint(make_runtime: Any) -> None:
    """A suspension committed by a later run (resume from the append) still takes the step's answers."""
    rt = make_runtime([_suspending_agent()])
    first = rt.start("picker", "go").result(timeout=120)
    assert first.status == "suspended_client_tool" and [p.tool_name for p in first.pending] == ["pick"]
    append = next(c["checkpoint_id"] for c in rt.session(first.session_id).checkpoints if c["kind"] == "append")
    again = rt.resume(first.session_id, mode="from_checkpoint", checkpoint_id=append).result(timeout=120)
    assert again.status == "suspended_client_tool" and [p.dispatch_id for p in again.pending] == [p.dispatch_id for p in first.pending]
    with pytest.raises(hx.HelixError) as err:
        rt.resume(first.session_id)  # still waiting for the client
    assert err.value.code == "calls_pending"
    receipt = rt.submit_tool_result(first.session_id, first.pending[0].dispatch_id, result={"picked": "a"})
    assert receipt.run is not None and receipt.run.result(timeout=120).status == "completed"
    view = rt.session(first.session_id)
    assert [(c.tool_name, c.status, len(c.attempts)) for c in view.calls] == [("nap", "ok", 1), ("pick", "ok", 0)]


def test_a_stop_answers_a_step_saved_by_an_earlier_run(make_runtime: Any) -> None:
    rt = make_runtime([_suspending_agent()])
    first = rt.start("picker", "go").result(timeout=120)
    append = next(c["checkpoint_id"] for c in rt.session(first.session_id).checkpoints if c["kind"] == "append")
    rt.resume(first.session_id, mode="from_checkpoint", checkpoint_id=append).result(timeout=120)
    assert rt.stop(first.session_id, kind="interrupt").status == "interrupted"
    view = rt.session(first.session_id)
    assert [(c.tool_name, c.status) for c in view.calls] == [("nap", "ok"), ("pick", "run_stopped")]
    answered = [p.tool_call_id for p in view.messages[-1].parts]
    assert answered == ["c1", "c2"]


def test_an_approval_rule_that_raises_asks_a_human(make_runtime: Any) -> None:
    def rule(args: dict[str, Any]) -> bool:
        raise RuntimeError("rule broke")

    @hx.tool(requires_approval=rule)
    def spend(amount: int) -> str:
        """Spend money."""
        return "spent"

    rt = make_runtime([hx.Agent("spender", _model([ToolCallPart("spend", {"amount": 5}, "c1")]), tools=[spend])])
    result = rt.start("spender", "go").result(timeout=120)
    assert result.status == "suspended_client_tool" and result.pending[0].kind == "approval"


def test_the_model_reads_the_rewound_transcript_in_the_process_that_cached_it(make_runtime: Any) -> None:
    """The transcript cache is per session: a rewind (resume from a checkpoint) in the same process
    must not leave the superseded messages in what the model reads next."""
    seen: list[list[str]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = [p.content for m in messages for p in m.parts if type(p).__name__ == "UserPromptPart"]
        seen.append([str(p) for p in prompts])
        if [type(p).__name__ for p in messages[-1].parts] == ["UserPromptPart"] and prompts[-1] == "one":
            return ModelResponse(parts=[ToolCallPart("nap", {"seconds": 0}, "n1")])  # an append to rewind to
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    rt = make_runtime([hx.Agent("talker", FunctionModel(reply), tools=[nap])])
    first = rt.start("talker", "one").result(timeout=120)
    rt.start("talker", "two", session_id=first.session_id).result(timeout=120)
    rt.start("talker", "three", session_id=first.session_id).result(timeout=120)
    assert seen[-1] == ["one", "two", "three"]
    view = rt.session(first.session_id)
    after_one = next(c["checkpoint_id"] for c in view.checkpoints if c["run_id"] == first.run_id and c["kind"] == "append")
    rt.resume(first.session_id, mode="with_message", message="four").result(timeout=120)
    assert seen[-1] == ["one", "two", "three", "four"]  # appended: read from the cache plus the new rows
    rt.resume(first.session_id, mode="from_checkpoint", checkpoint_id=after_one).result(timeout=120)
    assert seen[-1] == ["one"], seen[-1]  # rewound: "two", "three" and "four" are superseded
    active = [str(p.content) for m in rt.session(first.session_id).messages for p in m.parts if type(p).__name__ == "UserPromptPart"]
    assert active == ["one"]
