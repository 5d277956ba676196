"""The ledger's messages (pydantic-ai ``ModelMessage``s) as the OpenAI Agents SDK's input items, and
an SDK ``ModelResponse`` as the pydantic-ai ``ModelResponse`` the ledger records.

The ledger keeps one message shape whatever SDK asked the model, so the transcript, planning, the
commits, the views and recovery read an SDK agent's replies as they read any other. What the
pydantic-ai shape cannot hold (a reasoning item's encrypted content, an item's provider id) rides on
each part's ``provider_details`` as the SDK's own input item and is sent back as it was; the text
and arguments are always taken from the part, which is what the runtime may have escaped for the
wire (``transcript.for_model``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from agents.items import ModelResponse as SdkResponse
    from pydantic_ai.messages import ModelMessage, ModelResponse

#: The provider name on every part and reply the adapter records.
PROVIDER = "openai-agents"
#: ``provider_details`` key holding the SDK's own input item for a part.
ITEM_KEY = "openai_agents_item"


def _output_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for piece in content:
        if not isinstance(piece, str):
            raise UnsupportedFeatureError(f"a user message part of type {type(piece).__name__} cannot be sent through the OpenAI Agents SDK adapter (text only)")
        parts.append({"type": "input_text", "text": piece})
    return parts


def _request_items(message: Any) -> list[dict[str, Any]]:
    from pydantic_ai.messages import (
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        ToolReturnPart,
        UserPromptPart,
    )

    items: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            items.append({"role": "user", "content": _user_content(part.content)})
        elif isinstance(part, ToolReturnPart):
            items.append({"type": "function_call_output", "call_id": part.tool_call_id, "output": _output_text(part.content)})
        elif isinstance(part, RetryPromptPart):
            if part.tool_name is not None and part.tool_call_id:
                items.append({"type": "function_call_output", "call_id": part.tool_call_id, "output": part.model_response()})
            else:
                items.append({"role": "user", "content": part.model_response()})
        elif isinstance(part, RetryFeedbackPart):
            items.append({"role": "user", "content": part.model_response()})
        elif isinstance(part, SystemPromptPart):
            items.append({"role": "system", "content": part.content})
        else:
            raise UnsupportedFeatureError(f"a {type(part).__name__} cannot be sent through the OpenAI Agents SDK adapter")
    return items


def _response_items(message: Any) -> list[dict[str, Any]]:
    from pydantic_ai.messages import TextPart, ThinkingPart, ToolCallPart

    items: list[dict[str, Any]] = []
    for part in message.parts:
        raw = (getattr(part, "provider_details", None) or {}).get(ITEM_KEY)
        raw = dict(raw) if isinstance(raw, dict) else None
        if isinstance(part, ToolCallPart):
            item: dict[str, Any] = {"type": "function_call", "call_id": part.tool_call_id, "name": part.tool_name,
                                    "arguments": part.args_as_json_str()}
            if raw is not None and raw.get("id"):
                item["id"] = raw["id"]
            items.append(item)
        elif isinstance(part, TextPart):
            if raw is not None and raw.get("type") == "message":
                raw["content"] = [{"type": "output_text", "text": part.content, "annotations": []}]
                items.append(raw)
            else:
                items.append({"role": "assistant", "content": part.content})
        elif isinstance(part, ThinkingPart):
            if raw is not None:  # a reasoning item goes back as it came (its encrypted content too)
                items.append(raw)
        elif raw is not None:
            items.append(raw)
    return items


def to_items(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The transcript as the SDK's (Responses-shaped) input items; instructions are not among them
    (they go as the request's ``system_instructions``)."""
    from pydantic_ai.messages import ModelRequest

    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(_request_items(message) if isinstance(message, ModelRequest) else _response_items(message))
    return items


def _message_text(item: Any) -> str:
    texts = []
    for content in getattr(item, "content", None) or []:
        kind = getattr(content, "type", None)
        if kind == "output_text":
            texts.append(content.text or "")
        elif kind == "refusal":
            texts.append(content.refusal or "")
    return "".join(texts)


def to_response(response: SdkResponse, model_name: str) -> ModelResponse:
    """The SDK's reply as the ledger records it: one part per output item (a function call, a
    message's text, a reasoning summary), each carrying its SDK input item."""
    from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
    from pydantic_ai.usage import RequestUsage

    parts: list[Any] = []
    outputs: list[Any] = list(response.output)
    for out, item in zip(outputs, response.to_input_items(), strict=True):
        kind = getattr(out, "type", None)
        details = {ITEM_KEY: json.loads(json.dumps(item, default=str))}
        if kind == "function_call":
            parts.append(ToolCallPart(tool_name=out.name, args=out.arguments, tool_call_id=out.call_id, id=out.id,
                                      provider_name=PROVIDER, provider_details=details))
        elif kind == "message":
            parts.append(TextPart(content=_message_text(out), id=out.id, provider_name=PROVIDER, provider_details=details))
        elif kind == "reasoning":
            summary = "\n".join(s.text for s in (out.summary or []))
            parts.append(ThinkingPart(content=summary, id=out.id, provider_name=PROVIDER, provider_details=details))
        else:
            raise UnsupportedFeatureError(
                f"the model replied with a {kind!r} item: a provider-executed or non-function tool, which helix cannot gate or answer"
            )
    u = response.usage
    cached = getattr(getattr(u, "input_tokens_details", None), "cached_tokens", 0) or 0
    reasoning = getattr(getattr(u, "output_tokens_details", None), "reasoning_tokens", 0) or 0
    usage = RequestUsage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0, cache_read_tokens=cached,
                         details={"reasoning_tokens": reasoning} if reasoning else {})
    return ModelResponse(parts=parts, usage=usage, model_name=model_name, provider_name=PROVIDER,
                         provider_response_id=response.response_id)
