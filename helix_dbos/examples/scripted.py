"""Deterministic stand-ins for a model, so the examples run offline and the same way every time.

A scripted model decides its next move from the conversation alone (never from hidden state), which
is exactly what a recovered run needs: the same transcript always gets the same reply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

Reply = Callable[[ModelRequest], ModelResponse]


def returns(request: ModelRequest) -> dict[str, ToolReturnPart]:
    """The tool results of the last request, by tool name (the last one wins on duplicates)."""
    return {p.tool_name: p for p in request.parts if isinstance(p, ToolReturnPart)}


def user_text(request: ModelRequest) -> str | None:
    texts = [p.content for p in request.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
    return texts[-1] if texts else None


def status_of(part: ToolReturnPart) -> str:
    """'ok', or the status the runtime paired the call with (outcome_unknown, denied, ...)."""
    content = part.content
    if isinstance(content, dict) and isinstance(content.get("status"), str):
        return str(content["status"])
    return "ok"


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


def calls(preface: str | None, *parts: tuple[str, dict[str, Any]], prefix: str = "call") -> ModelResponse:
    """A reply that says ``preface`` and calls each (tool, args) in order."""
    out: list[Any] = [TextPart(preface)] if preface else []
    out += [ToolCallPart(name, args, tool_call_id=f"{prefix}-{i}") for i, (name, args) in enumerate(parts)]
    return ModelResponse(parts=out)


def scripted_model(name: str, reply: Reply) -> FunctionModel:
    """A FunctionModel that answers the last request with ``reply``.

    (The runtime answers a malformed call with a ToolReturnPart, never a RetryPromptPart, so the
    reply sees every answer it could get.)
    """

    def respond(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        return reply(last)

    return FunctionModel(respond, model_name=name)
