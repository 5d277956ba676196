"""Entries into a fleet: priorities, child runs under their agent's limit, stops of queued runs,
live output read through a front end.

Workers are ``helix-dbos worker --app tests.scenarios.entries_app:runtime``; a front end is
``runtime(mode="client")`` in the test process. Bodies and model requests are recorded outside the
runtime (``ENTRIES_EFFECTS``, one fsynced line each, with the pid and the session that ran it).

Agents: ``line`` (one slow body, then a streamed text answer), ``boss`` (delegates to the remote
sub-agent ``helper`` and the companion ``pal`` in one step), ``helper`` and ``pal`` (one slow body
each). Environment: ``ENTRIES_EFFECTS`` (folder), ``ENTRIES_DELAY`` (seconds a body takes, default
1), ``ENTRIES_LIMITS`` (``agent=max_running,...``), ``ENTRIES_WORKER_CONCURRENCY``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

#: The text ``line`` streams as its answer, in these chunks.
CHUNKS = ["Streamed ", "from ", "the ", "worker."]


_record = effects.recorder("ENTRIES_EFFECTS")


def _session_of(messages: list[ModelMessage]) -> str:
    """The first user message: each test sends its session id as the message, to tell requests apart."""
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                content = getattr(p, "content", None)
                if p.part_kind == "user-prompt" and isinstance(content, str):
                    return content
    return ""


def _answered(messages: list[ModelMessage]) -> bool:
    """Whether the latest request carries tool results (the body ran): then the agent answers."""
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)


@hx.tool(replay="safe")
async def work(ctx: hx.ToolContext, key: str) -> str:
    """Work for ENTRIES_DELAY seconds."""
    _record("bodies", agent=ctx.agent_name, session_id=ctx.session_id, run_id=ctx.run_id)
    await asyncio.sleep(float(os.environ.get("ENTRIES_DELAY", "1")))
    return f"worked on {key}"


def _worker_model(name: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        _record("model", agent=name, message=_session_of(messages))
        if _answered(messages):
            return ModelResponse(parts=[TextPart(f"{name} done")])
        return ModelResponse(parts=[ToolCallPart("work", {"key": name}, tool_call_id=f"{name}-work")])

    return FunctionModel(reply)


def _line_model() -> FunctionModel:
    """``line``: the ``work`` call, then its answer in ``CHUNKS``; streamed when live output is on."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        _record("model", agent="line", message=_session_of(messages))
        if _answered(messages):
            return ModelResponse(parts=[TextPart("".join(CHUNKS))])
        return ModelResponse(parts=[ToolCallPart("work", {"key": "line"}, tool_call_id="line-work")])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        _record("model", agent="line", message=_session_of(messages), streamed=True)
        if not _answered(messages):
            yield {0: DeltaToolCall(name="work", json_args='{"key": "line"}', tool_call_id="line-work")}
            return
        for chunk in CHUNKS:
            await asyncio.sleep(0.05)
            yield chunk

    return FunctionModel(reply, stream_function=stream)


def _boss_model() -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        _record("model", agent="boss", message=_session_of(messages))
        if _answered(messages):
            return ModelResponse(parts=[TextPart("boss done")])
        return ModelResponse(parts=[
            ToolCallPart("subagent__helper", {"message": "help"}, tool_call_id="b-helper"),
            ToolCallPart("subagent__pal", {"message": "chat"}, tool_call_id="b-pal"),
        ])

    return FunctionModel(reply)


def agents() -> list[hx.Agent]:
    helper = hx.Agent("helper", _worker_model("helper"), tools=[work])
    pal = hx.Agent("pal", _worker_model("pal"), tools=[work])
    boss = hx.Agent("boss", _boss_model(), sub_agents=[hx.remote_agent(helper, description="Help."), hx.companion_agent(pal, description="Chat.")])
    return [hx.Agent("line", _line_model(), tools=[work]), boss]


def limits() -> dict[str, hx.AgentLimits]:
    raw = os.environ.get("ENTRIES_LIMITS", "")
    out: dict[str, hx.AgentLimits] = {}
    for item in filter(None, raw.split(",")):
        name, _, n = item.partition("=")
        out[name] = hx.AgentLimits(max_running=int(n))
    return out


def runtime(mode: str | None = None, database_url: str | None = None) -> hx.Runtime:
    concurrency = os.environ.get("ENTRIES_WORKER_CONCURRENCY")
    return hx.Runtime(
        agents(),
        limits=limits(),
        database_url=database_url,
        worker_concurrency=int(concurrency) if concurrency else None,
        **({"mode": mode} if mode else {}),
    )
