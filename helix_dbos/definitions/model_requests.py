"""How an ``hx.Agent`` asks its model: pydantic-ai's direct API, one request, no loop of its own.

pydantic-ai is the core's model and message layer: the ledger records its ``ModelMessage``s and a
reply is its ``ModelResponse`` whatever SDK asked. An ``hx.Agent``'s model is a pydantic-ai
``Model``, so its request is ``pydantic_ai.direct`` with the agent's tools, sub-agents and output
tool offered; an adapter whose SDK asks its model its own way overrides ``Agent.request`` (see
``helix_dbos/adapters/base.py``). pydantic-ai loads on the first request, not with the definitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse, ModelResponseStreamEvent
    from pydantic_ai.models import Model, ModelRequestParameters
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition

#: Where a streaming model request hands each event as it comes (``Agent.stream``): pydantic-ai's
#: stream events, the core's delta shape as ``ModelResponse`` is its reply shape.
StreamEvents = Callable[["ModelResponseStreamEvent"], Awaitable[None]]


@dataclass(frozen=True)
class Asking:
    """What one request of an ``hx.Agent`` is made of, read off the agent (``Agent._asking``)."""

    model: Model
    model_settings: ModelSettings | None
    function_tools: list[ToolDefinition]
    output_tool: ToolDefinition | None


def request_parameters(asking: Asking) -> ModelRequestParameters:
    """The tools the model is offered: the agent's, its sub-agents', and ``final_result`` for a
    structured output (then text is no output)."""
    from pydantic_ai.models import ModelRequestParameters

    output = asking.output_tool
    return ModelRequestParameters(
        function_tools=list(asking.function_tools),
        output_tools=[output] if output else [],
        allow_text_output=output is None,
        output_mode="tool" if output else "text",
    )


def settings(asking: Asking) -> ModelSettings | None:
    """The agent's model settings with the provider SDK's own retries off (``max_retries=0``): the
    step's retry budget is the only one, so it counts requests as the provider sees them. A model
    that says it ignores ``max_retries`` (and would warn) is sent the settings as they are."""
    ignores = getattr(asking.model, "_unsupported_settings", None)
    if callable(ignores) and "max_retries" in ignores():
        return asking.model_settings
    return cast("ModelSettings", {**(asking.model_settings or {}), "max_retries": 0})


def with_instructions(messages: list[ModelMessage], instructions: str | None) -> list[ModelMessage]:
    """``messages`` with this request's instructions on the last request message (a copy: the
    caller's list and messages are left as they are). Instructions come from the agent as the code
    defines it now, never from storage."""
    out = list(messages)
    if not instructions:
        return out
    from pydantic_ai.messages import ModelRequest

    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if isinstance(m, ModelRequest):
            out[i] = dataclasses.replace(m, instructions=instructions)
            break
    return out


def prepared(asking: Asking, messages: list[ModelMessage], instructions: str | None) -> Callable[[], Awaitable[ModelResponse]]:
    """The request built (model, messages with ``instructions``, settings, tools), to be sent by the
    returned call: built before the rate grant, sent right after it (``Agent.prepare``)."""
    from pydantic_ai.direct import model_request

    model, sent, model_settings, parameters = asking.model, with_instructions(messages, instructions), settings(asking), request_parameters(asking)

    def send() -> Awaitable[ModelResponse]:
        return model_request(model, sent, model_settings=model_settings, model_request_parameters=parameters)

    return send


async def request(asking: Asking, messages: list[ModelMessage], instructions: str | None) -> ModelResponse:
    return await prepared(asking, messages, instructions)()


async def stream(asking: Asking, messages: list[ModelMessage], instructions: str | None, events: StreamEvents) -> ModelResponse:
    """``request``, streamed: each event to ``events``; a model that cannot stream (a
    ``FunctionModel`` without ``stream_function``) makes a plain request and hands no event."""
    from pydantic_ai.direct import model_request_stream
    from pydantic_ai.models.function import FunctionModel

    if isinstance(asking.model, FunctionModel) and asking.model.stream_function is None:
        return await request(asking, messages, instructions)
    async with model_request_stream(asking.model, with_instructions(messages, instructions),
                                    model_settings=settings(asking), model_request_parameters=request_parameters(asking)) as streamed:
        async for event in streamed:
            await events(event)
        return streamed.get()


def is_retryable(exc: BaseException) -> bool:
    """pydantic-ai's provider errors worth another request in the same step: rate limits, overload,
    5xx, network, timeouts (pydantic-ai has already sorted the provider SDK's exception into these)."""
    from pydantic_ai.exceptions import (
        ModelConnectionError,
        ModelHTTPError,
        ModelRateLimitError,
        ModelRequestTimeout,
        ModelServerError,
        ModelUnavailableError,
    )

    retryable = (ModelRateLimitError, ModelUnavailableError, ModelServerError, ModelConnectionError, ModelRequestTimeout)
    if isinstance(exc, retryable):
        return True
    return isinstance(exc, ModelHTTPError) and (exc.status_code in (408, 429) or exc.status_code >= 500)
