"""An SDK model's ``stream_response`` as the runtime's live output: its Responses-shaped stream events
read into pydantic-ai's part events (the core's delta shape), and its completed response read into
the same reply ``get_response`` gives.

The SDK's ``OpenAIChatCompletionsModel`` turns chat chunks into the same Responses events
``OpenAIResponsesModel`` passes through, so one reading serves both (and any ``agents.Model`` that
streams). The part index of an event is the ``output_index`` of its item: ``messages.to_response``
makes one part per output item, so a delta lands on the part the saved reply has at that index.

The reply is built as the SDK's runner builds it from a stream (``run_loop``): the
``response.completed`` event's response, its output completed from the ``output_item.done`` items
when a backend leaves it empty; a stream that ends without one is no reply, ``response.failed`` /
``error`` is the error it reports, classified by its code as pydantic-ai classifies it (a
``server_error`` is asked again within the step's budget), and ``response.incomplete`` is the SDK
model's own ``ModelBehaviorError``, as from ``get_response``. A stream the provider cut mid-body raises the
transport's error, which ``map_api_errors`` reads as pydantic-ai's ``ModelConnectionError``: the
step's budget asks again, as for a pydantic-ai model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.items import ModelResponse as SdkResponse
    from pydantic_ai.messages import ModelResponseStreamEvent

#: Responses stream events that end a response with an error the provider reports. (The SDK's own
#: model raises ``ModelBehaviorError`` after ``response.incomplete``, as its ``get_response`` does:
#: that is left to it.)
FAILED = frozenset({"response.failed", "error", "response.error"})


def part_event(event: Any) -> ModelResponseStreamEvent | None:
    """One SDK stream event as a pydantic-ai part event, or ``None`` for one that adds no content
    (lifecycle, content-part and done events). A function call starts with empty arguments and grows
    by its argument deltas only (the chat handler's fallback sends the whole arguments on both)."""
    from pydantic_ai.messages import (
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
        ThinkingPart,
        ThinkingPartDelta,
        ToolCallPart,
        ToolCallPartDelta,
    )

    from .messages import PROVIDER

    kind = getattr(event, "type", None)
    index = getattr(event, "output_index", None)
    if not isinstance(index, int):
        return None
    if kind == "response.output_item.added":
        item = event.item
        item_kind = getattr(item, "type", None)
        if item_kind == "message":
            return PartStartEvent(index=index, part=TextPart(content="", provider_name=PROVIDER))
        if item_kind == "function_call":
            return PartStartEvent(index=index, part=ToolCallPart(tool_name=item.name, args="", tool_call_id=item.call_id,
                                                                 provider_name=PROVIDER))
        if item_kind == "reasoning":
            return PartStartEvent(index=index, part=ThinkingPart(content="", provider_name=PROVIDER))
        return None
    if kind in ("response.output_text.delta", "response.refusal.delta"):
        return PartDeltaEvent(index=index, delta=TextPartDelta(content_delta=event.delta))
    if kind == "response.function_call_arguments.delta":
        return PartDeltaEvent(index=index, delta=ToolCallPartDelta(args_delta=event.delta))
    if kind == "response.reasoning_summary_text.delta":
        return PartDeltaEvent(index=index, delta=ThinkingPartDelta(content_delta=event.delta))
    return None


def failure(event: Any, model_name: str) -> Exception:
    """The error a ``response.failed`` or ``error`` event reports, classified by its code as a
    pydantic-ai OpenAI model classifies the same event (a ``server_error`` is worth asking again)."""
    from pydantic_ai.models.openai._errors import response_error, response_error_type

    error = getattr(getattr(event, "response", None), "error", None)
    if error is not None:
        return response_error(model_name, error.code, error.message, error_type=response_error_type(error), in_stream=True)
    message = getattr(event, "message", None) or f"the model's stream ended with {event.type}"
    return response_error(model_name, getattr(event, "code", None), str(message), in_stream=True)


async def collect(stream: AsyncIterator[Any], events: Any, model_name: str) -> SdkResponse:
    """Hand each event of ``stream`` to ``events`` (as a part event) and return the SDK's reply."""
    from agents.items import ModelResponse as SdkModelResponse
    from agents.models.fake_id import FAKE_RESPONSES_ID
    from agents.usage import Usage, _response_usage_to_usage
    from pydantic_ai.exceptions import ModelConnectionError

    completed: Any = None
    done: list[Any] = []
    async with aclosing(stream) as events_in:  # type: ignore[type-var]
        async for event in events_in:
            kind = getattr(event, "type", None)
            if kind in FAILED:
                raise failure(event, model_name)
            if kind == "response.completed":
                completed = event.response
            elif kind == "response.output_item.done":
                done.append(event.item)
            part = part_event(event)
            if part is not None:
                await events(part)
    if completed is None:  # the body ended without its last event: no reply, ask again
        raise ModelConnectionError(model_name, "the model's stream ended before the response completed")
    output = list(completed.output) or done
    usage = _response_usage_to_usage(completed.usage) if completed.usage is not None else Usage()
    # the chat handler's response carries a placeholder id, where ``get_response`` gives none
    response_id = None if completed.id == FAKE_RESPONSES_ID else completed.id
    return SdkModelResponse(output=output, usage=usage, response_id=response_id)
