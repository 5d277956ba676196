"""Runs a stop races a worker's dequeue for: a worker app whose model and bodies are counted per session.

Workers are ``helix-dbos worker --app tests.scenarios.withdraw_race_app:runtime``; the test's front
end is ``runtime("client", url)`` in the test process. Each session's prompt is its own id, so every
model request (``model``) and body start (``bodies``) is recorded against it in ``RACE_EFFECTS``
(one fsynced line each, with the pid): a withdrawn run must have none of either.
"""

from __future__ import annotations

import asyncio

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects


_record = effects.recorder("RACE_EFFECTS")


def _session(messages: list[ModelMessage]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return str(next(p.content for p in first.parts if isinstance(p, UserPromptPart)))


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = sum(isinstance(m, ModelResponse) for m in messages)
    session = _session(messages)
    _record("model", session=session, step=step)
    if step == 0:
        return ModelResponse(parts=[TextPart("on it"), ToolCallPart("touch", {"key": session}, tool_call_id="c-touch")])
    return ModelResponse(parts=[TextPart(f"done after {step} steps")])


async def touch(ctx: hx.ToolContext, key: str) -> str:
    """An unsafe tool: records its start, then takes a moment."""
    _record("bodies", session=ctx.session_id, run_id=ctx.run_id)
    await asyncio.sleep(0.2)
    return key


def runtime(mode: str | None = None, database_url: str | None = None) -> hx.Runtime:
    """Agent ``racer``: one step with one unsafe call, then an answer."""
    return hx.Runtime([hx.Agent("racer", FunctionModel(_reply), tools=[hx.tool(name="touch")(touch)])],
                      database_url=database_url, **({"mode": mode} if mode else {}))
