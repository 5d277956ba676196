"""Every failure leaves the service as ``{"error", "code", "detail"}`` with a fitting status.

Runtime refusals are ``HelixError``s and carry their own code and status. FastAPI's request
validation (a 422 by default) becomes our 400 ``validation_error``, so a client handles one shape
and one code for every kind of bad input; routing misses get ``not_found`` / ``method_not_allowed``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import HelixError, ValidationError
from .middleware import allowed_methods
from .schemas import UNION_TAGS

log = logging.getLogger("helix_dbos.service")

HTTP_CODES: dict[int, tuple[str, str]] = {
    404: ("not_found", "There is nothing at this address."),
    405: ("method_not_allowed", "This address does not accept that method."),
}

#: The error codes the HTTP API can answer with (documented in docs/service.md, each one tested).
API_ERROR_CODES = (
    "validation_error",
    "wrong_answer_kind",
    "host_not_allowed",
    "unsupported_media_type",
    "payload_too_large",
    "unauthenticated",
    "forbidden",
    "csrf_failed",
    "not_found",
    "unknown_agent",
    "session_not_found",
    "run_not_found",
    "checkpoint_not_found",
    "call_not_found",
    "method_not_allowed",
    "session_running",
    "nothing_to_resume",
    "calls_pending",
    "stale_answer",
    "duplicate_answer",
    "store_unavailable",
    "internal_error",
)


def body(error: str, code: str, detail: Any = None) -> dict[str, Any]:
    return {"error": error, "code": code, "detail": jsonable_encoder(detail)}


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    loc = list(loc)
    if len(loc) >= 3 and loc[0] == "body" and loc[1] in UNION_TAGS:  # ("body", "with_message", "message")
        del loc[1]
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def validation_sentence(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"The request is not valid: {_where(first.get('loc', ()))}: {first.get('msg', 'invalid')}{more}."


async def _helix(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HelixError)
    return JSONResponse(jsonable_encoder(exc.to_dict()), status_code=exc.status)


async def _request_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
    return JSONResponse(body(validation_sentence(errors), ValidationError.code, errors), status_code=400)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code, sentence = HTTP_CODES.get(exc.status_code, ("http_error", str(exc.detail)))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # name every method of the address, not only the first route's
        headers["Allow"] = ", ".join(sorted(allowed_methods(request.app.router.routes, request.scope) | {"OPTIONS"}))
    return JSONResponse(body(sentence, code, exc.detail), status_code=exc.status_code, headers=headers)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return JSONResponse(body("Something went wrong on our side; please try again.", "internal_error", type(exc).__name__), status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(HelixError, _helix)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
