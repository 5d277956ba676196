"""The conversation as pydantic-ai messages, stored one JSON row per message.

What the model reads for a call is built here from the call's ledger row, so a recovered step, a
redirect and a normal step commit all tell the model the same thing for the same status.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from ...ledger.escape import escape_json, has_lone_surrogate, readable_json, unescape_json
from ...ledger.user_json import JsonObject
from ...recovery.texts import PAIRING_TEXTS

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, ModelResponse
    from pydantic_ai.messages import ToolReturnPart as ToolReturnPartType


def _pai() -> ModuleType:
    """pydantic-ai's message types, imported at first use: a worker pays for pydantic-ai when a run
    first reads or writes a message, not when it imports the runtime (``sys.modules`` caches it)."""
    import pydantic_ai.messages

    return pydantic_ai.messages


def _adapter() -> Any:
    from pydantic_ai import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter


def _replaced_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any((isinstance(k, str) and "\ufffd" in k) or _replaced_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_replaced_key(v) for v in value)
    return False


def dump(message: ModelMessage) -> JsonObject:
    """The message as JSON, exactly: also a lone surrogate in an object key of a tool's result or arguments.

    pydantic's JSON mode keeps a lone surrogate in a string value but replaces it with U+FFFD in a
    dict key, which would change what the model reads next. When a key holds U+FFFD after the fast
    dump, the message is dumped again through the ledger's reversible escape, which is exact.
    """
    adapter = _adapter()
    body: JsonObject = adapter.dump_python([message], mode="json")[0]
    if not _replaced_key(body):
        return body
    plain = escape_json(adapter.dump_python([message], mode="python"))
    escaped = adapter.dump_python(adapter.validate_python(plain), mode="json")[0]
    return dict(unescape_json(escaped))


def load(bodies: Sequence[Any]) -> list[ModelMessage]:
    return _adapter().validate_python(list(bodies))  # type: ignore[no-any-return]


class TranscriptCache:
    """The loaded transcript of the sessions this process is driving, so a model request reads and
    validates only the messages added since the session's previous request here (step 200 costs
    what step 10 does, across the session's runs).

    A session only grows at its end, except when a rewind supersedes messages: every entry holds
    how many of the session's messages were superseded when it was loaded, and a request that
    finds that number changed reads the session whole again. Bounded: least recently used
    sessions drop out and are read whole again.
    """

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._sessions: OrderedDict[str, tuple[int, int, list[ModelMessage]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> tuple[int, int, list[ModelMessage]]:
        """The last message number read (-1: none), the superseded count then, and the messages."""
        with self._lock:
            hit = self._sessions.get(session_id)
            if hit is None:
                return -1, 0, []
            self._sessions.move_to_end(session_id)
            return hit[0], hit[1], list(hit[2])

    def put(self, session_id: str, last_seq: int, superseded: int, messages: list[ModelMessage]) -> None:
        with self._lock:
            self._sessions[session_id] = (last_seq, superseded, list(messages))
            self._sessions.move_to_end(session_id)
            while len(self._sessions) > self.size:
                self._sessions.popitem(last=False)


def load_response(body: Mapping[str, Any]) -> ModelResponse:
    message = load([body])[0]
    assert isinstance(message, _pai().ModelResponse)
    out: ModelResponse = message
    return out


def user_message(text: str) -> ModelRequest:
    m = _pai()
    out: ModelRequest = m.ModelRequest(parts=[m.UserPromptPart(content=text)])
    return out


def _is_jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def call_part(call: Mapping[str, Any]) -> ModelRequestPart:
    """The part that answers one call, from its ledger row."""
    ToolReturnPart: type[ToolReturnPartType] = _pai().ToolReturnPart
    name, call_id, status = call["tool_name"], call["tool_call_id"], call["status"]
    if status == "ok":  # the row keeps NaN; the transcript (JSON) and the model say "NaN". Lone
        # surrogates stay exact here and are escaped only in what is sent (for_model)
        return ToolReturnPart(tool_name=name, content=readable_json(call["result"], surrogates=False), tool_call_id=call_id)
    if status == "error" and call["paired_by"] == "validation":
        # Malformed arguments or an unknown tool: a retry, as pydantic-ai's own loop answers it.
        error = call["error"] or {}
        cause = "unknown_tool" if error.get("code") == "unknown_tool" else "validation_error"
        return ToolReturnPart(
            tool_name=name,
            content=error.get("message", "invalid call"),
            tool_call_id=call_id,
            outcome="retried",
            retry=_pai().RetryInfo(cause=cause),
        )
    if status == "error":
        return ToolReturnPart(tool_name=name, content={"status": "error", "error": readable_json(call["error"], surrogates=False)}, tool_call_id=call_id)
    if status == "denied":
        reason = call.get("approval_reason")
        text = PAIRING_TEXTS["denied"] + (f": {reason}" if reason else "")
        return ToolReturnPart(tool_name=name, content={"status": "denied", "message": text}, tool_call_id=call_id)
    note = call["outcome_note"] or PAIRING_TEXTS.get(status, status)
    return ToolReturnPart(tool_name=name, content={"status": status, "message": note}, tool_call_id=call_id)


def for_model(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The messages as a provider can be sent them: every lone surrogate in a part's text, arguments
    or content in the ledger's escape form (``␛d800``), every non-finite number as ``"NaN"`` and the
    like (``escape.readable_json``).

    The transcript keeps what was said exactly; a provider's request is UTF-8 JSON, which can hold
    neither (pydantic-ai's own JSON, FunctionModel's usage estimate included, fails on them), so
    without this a value a tool or a model produced once failed every later request of the run.
    The same list when nothing needed it."""
    out: list[ModelMessage] = []
    changed = False
    for message in messages:
        parts: list[Any] = []
        this = False
        for part in message.parts:
            if _checked(part):
                parts.append(part)
                continue
            fields = {f: readable_json(getattr(part, f)) for f in ("content", "args") if hasattr(part, f) and not _sendable(getattr(part, f))}
            if any(v is not getattr(part, f) for f, v in fields.items()):
                part = dataclasses.replace(part, **fields)
                this = True
            else:
                _remember(part)  # sendable as it is: the session's next requests skip it
            parts.append(part)
        out.append(dataclasses.replace(message, parts=cast(Any, parts)) if this else message)
        changed = changed or this
    return out if changed else messages


#: Parts already found sendable as they are, by identity: a session's loaded messages are cached
#: across its requests (``TranscriptCache``), so each part is checked once, not once per request.
_SENDABLE: OrderedDict[int, Any] = OrderedDict()
_SENDABLE_SIZE = 4096
_sendable_lock = threading.Lock()


def _checked(part: Any) -> bool:
    with _sendable_lock:
        return _SENDABLE.get(id(part)) is part


def _remember(part: Any) -> None:
    with _sendable_lock:
        _SENDABLE[id(part)] = part  # holding it keeps its id from being reused while cached
        while len(_SENDABLE) > _SENDABLE_SIZE:
            _SENDABLE.popitem(last=False)


def _sendable(value: Any) -> bool:
    """Whether ``value`` is already what a provider can be sent (checked at C speed: JSON without
    NaN, then one regex search for a lone surrogate), so the common case costs no Python walk."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # NaN or infinity, or not plain JSON (user content parts): walk it
        return False
    return not has_lone_surrogate(text)


def results_message(calls: Sequence[Mapping[str, Any]], message: str | None = None) -> ModelRequest:
    """One request answering every call of a step in reply order, then (if any) the redirecting message."""
    m = _pai()
    parts: list[ModelRequestPart] = [call_part(c) for c in sorted(calls, key=lambda c: c["position"])]
    if message is not None:
        parts.append(m.UserPromptPart(content=message))
    out: ModelRequest = m.ModelRequest(parts=parts)
    return out


def text_not_allowed(text: str) -> ModelRequest:
    """The retry a model gets for plain text when the agent needs structured output."""
    m = _pai()
    out: ModelRequest = m.ModelRequest(parts=[m.RetryFeedbackPart(content=text, retry=m.RetryInfo(cause="no_output"))])
    return out


def jsonable(value: Any) -> tuple[bool, Any]:
    """(True, json-ready value) or (False, reason): tool results must be readable in SQL."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if _is_jsonable(value):
        return True, value
    try:  # models, dataclasses, dates inside lists and dicts: as pydantic-ai serialises a tool's return
        import pydantic_core

        dumped = pydantic_core.to_jsonable_python(value)
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
        dumped = None
    if dumped is not None and _is_jsonable(dumped):
        return True, dumped
    return False, f"tool result of type {type(value).__name__} is not JSON-serialisable"


def reply_text(response: ModelResponse) -> str:
    """The reply's text parts, joined (what a final answer or a step's note says)."""
    from pydantic_ai.messages import TextPart

    return "".join(p.content for p in response.parts if isinstance(p, TextPart))
