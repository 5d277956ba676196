"""The JSON responses of the API, valid UTF-8 whatever string the ledger holds.

A tool or a model may produce a lone surrogate, which the ledger keeps exactly (``ledger/escape.py``)
but which UTF-8 cannot encode: FastAPI's own JSON rendering then fails with a 500 on every read of
that session. JSON can carry it as its ``\\uXXXX`` escape, which is what this response writes, so a
client's JSON parser gets the original string back.

JSON has no NaN or Infinity either, which a tool may return (SQLite's JSON keeps them): they are
written as ``null``, as JavaScript's ``JSON.stringify`` writes them, rather than as the ``NaN``
token no strict parser (a browser's ``JSON.parse``) reads.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar

import pydantic_core
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity replaced by ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(content: Any) -> str:
    """Strict JSON text of ``content``: non-finite numbers as ``null``, lone surrogates as escapes."""
    options: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "indent": None, "separators": (",", ":"), "default": pydantic_core.to_jsonable_python}
    try:
        text = json.dumps(content, **options)
    except ValueError:  # a NaN or an infinity somewhere: the rare path walks the value
        text = json.dumps(finite(content), **options)
    return _SURROGATE.sub(_escape, text)


class LedgerJSONResponse(JSONResponse):
    """``JSONResponse`` whose lone surrogates are written as JSON escapes (only inside strings)."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def respond(model: BaseModel, status_code: int = 200) -> LedgerJSONResponse:
    """A response body that carries ledger data (tool results, arguments, the transcript) exactly.

    pydantic's JSON mode cannot encode a lone surrogate in an object key (a tool may return one), so
    such a body is dumped in Python mode and rendered here instead of failing the request.
    """
    try:
        content = model.model_dump(mode="json")
    except (UnicodeEncodeError, ValueError):
        content = model.model_dump(mode="python")
    return LedgerJSONResponse(content, status_code=status_code)


class EventStream(StreamingResponse):
    """An SSE stream: as a route's ``response_class`` it makes OpenAPI publish ``text/event-stream``
    and nothing else, so a generated client reads the stream as text instead of parsing it as JSON.

    Not FastAPI's ``EventSourceResponse``, which would take the endpoint for a generator of events;
    ours return the stream they build, after the checks that answer 404 before it starts.
    """

    media_type = "text/event-stream"
    HEADERS: ClassVar[dict[str, str]] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
