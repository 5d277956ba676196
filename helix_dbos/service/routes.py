"""The endpoints. Each one awaits a runtime ``*_async`` twin (or a thread), never blocking the loop.

Entries answer ``202 Accepted`` with the run they opened; ``?wait=SECONDS`` holds the response
until the run is at rest (completed, failed, interrupted or suspended on answers) or the time is
up, whichever is first. Progress in between is on ``GET /sessions/{id}/events``.

Every endpoint but ``/healthz`` authenticates the caller (``auth.py``) and checks, against the
session's owner, that the caller may see it and take this action; a query parameter the endpoint
does not take is refused rather than silently ignored (``stop?wiat=10`` would otherwise vanish).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request

from .. import wire
from ..definitions.inputs import SESSION_ID_MAX_LENGTH, SESSION_ID_PATTERN
from ..errors import (
    ForbiddenError,
    PayloadTooLargeError,
    RunNotFoundError,
    RunTimeoutError,
    SessionNotFoundError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from ..ledger.engine import is_sqlite
from ..ledger.escape import has_unstorable
from ..runtime import AnswerReceipt, RunHandle, Runtime
from ..views import SessionSummary
from . import auth, events, views
from . import schemas as s
from .http import is_stopping
from .responses import EventStream, LedgerJSONResponse, dumps, respond

MAX_SEQ = events.MAX_SEQ


def storable_parameters(request: Request) -> None:
    """Refuse a query or path parameter holding NUL or a lone surrogate, whatever the endpoint.

    Such a value names nothing the ledger can hold, and Postgres refuses it in a query (a driver
    error, a 500), so it is the caller's 400 before any read. (Starlette decodes a percent-encoded
    byte sequence that is not UTF-8 to U+FFFD, so a lone surrogate arrives only from in-process
    clients; the check is the same.)
    """
    for where, params in (("query", request.query_params.multi_items()), ("path", list(request.path_params.items()))):
        for name, value in params:
            if (isinstance(value, str) and has_unstorable(value)) or has_unstorable(name):
                raise ValidationError(
                    f"the {where} parameter {name!r} holds a NUL character or a lone surrogate",
                    detail={"parameter": name, "in": where},
                )


async def known_query(request: Request) -> None:
    """Refuse query parameters the endpoint does not declare, instead of ignoring them, and values
    no store can hold (``storable_parameters``)."""
    storable_parameters(request)
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    declared = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        declared |= {p.alias for p in sub.query_params}
    unknown = sorted(set(request.query_params) - declared)
    if unknown:
        raise ValidationError(
            f"unknown query parameter {unknown[0]!r}" + (f"; this endpoint takes {', '.join(sorted(declared))}" if declared else "; this endpoint takes none"),
            detail={"unknown": unknown, "accepted": sorted(declared)},
        )


BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def json_only(request: Request) -> None:
    """Refuse a state-changing request that is not declared JSON (415), empty bodies included.

    A page on another origin can make a browser send a form or ``text/plain`` (or no body at all)
    without asking the service first; ``application/json`` it cannot, without a CORS preflight this
    service does not grant. So this refusal stops those requests before they are read, whatever
    credentials the browser attached, and a body-less ``POST .../retry`` never means "recover".
    """
    if request.method not in BODY_METHODS:
        return
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise UnsupportedMediaTypeError(
            "This endpoint takes a JSON body: send 'Content-Type: application/json' (an empty object {} where no field is needed).",
            detail={"content_type": request.headers.get("content-type")},
        )


def check_sizes(request: Request, req: Any) -> None:
    """Refuse a message (or a client tool's error) longer than ``max_message_chars`` and a client
    tool's result over ``max_result_bytes`` of JSON: 413 ``payload_too_large``, before anything is
    stored. The body as a whole was capped before it was read (``middleware.BodyLimit``)."""
    settings = request.app.state.service_settings
    for field in ("message", "error"):
        value = getattr(req, field, None)
        if isinstance(value, str) and len(value) > settings.max_message_chars:
            raise PayloadTooLargeError(
                f"The {field} is longer than this service takes ({settings.max_message_chars} characters).",
                detail={"field": field, "length": len(value), "limit_chars": settings.max_message_chars, "setting": "HELIX_DBOS_MAX_MESSAGE_CHARS"},
            )
    if isinstance(req, s.ClientOk):
        size = len(dumps(req.result).encode())
        if size > settings.max_result_bytes:
            raise PayloadTooLargeError(
                f"The result is larger than this service stores ({settings.max_result_bytes} bytes of JSON).",
                detail={"field": "result", "bytes": size, "limit_bytes": settings.max_result_bytes, "setting": "HELIX_DBOS_MAX_RESULT_BYTES"},
            )


async def principal(request: Request) -> auth.Principal:
    """The authenticated caller (``anonymous`` when the service runs without authentication)."""
    found = await auth.authenticate(request, request.app.state.service_settings)
    request.state.principal = found
    return found


Caller = Annotated[auth.Principal, Depends(principal)]

# An explicit response class (not FastAPI's default) also takes FastAPI off its direct pydantic JSON
# path, which cannot encode a lone surrogate a tool returned (see responses.py).
router = APIRouter(default_response_class=LedgerJSONResponse, dependencies=[Depends(json_only), Depends(known_query)])
public = APIRouter(default_response_class=LedgerJSONResponse, dependencies=[Depends(json_only), Depends(known_query)])

Wait = Annotated[float, Query(ge=0, le=300, description="Seconds to wait for the run to come to rest before answering.")]
SessionId = Annotated[str, Path(min_length=1, max_length=SESSION_ID_MAX_LENGTH, pattern=SESSION_ID_PATTERN)]
#: The byte rule of text parameters, published (``storable_parameters`` enforces it for every one).
TEXT = s.TEXT
DispatchId = Annotated[str, Path(min_length=1, max_length=64, json_schema_extra=TEXT)]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": s.ErrorBody} for code in (400, 401, *codes)}


def stream_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``_errors`` for an SSE route: its refusals are JSON, though its own media type is the stream's."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {code: {"content": body} for code in (400, 401, *codes)}


def rt(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


async def _settle(runtime: Runtime, handle: RunHandle, wait: float) -> Any:
    if wait > 0:
        with contextlib.suppress(RunTimeoutError):  # still running after ?wait=: report it as it stands
            return views.run_out(await handle.result_async(timeout=wait))
    return views.run_out(await runtime.get_run_async(handle.run_id))


async def _answered(runtime: Runtime, receipt: AnswerReceipt, wait: float) -> s.AnswerOut:
    run = await _settle(runtime, receipt.run, wait) if receipt.run is not None else None
    return views.answer_out(receipt, run)


async def _allowed(request: Request, caller: auth.Principal, session_id: str, action: auth.Action) -> SessionSummary:
    """The session's row, once the caller may take ``action`` on it (else 404 or 403)."""
    row = await asyncio.to_thread(rt(request).reader.summary, session_id)
    auth.check(caller, row.get("owner"), action, session_id)
    return row


@public.get("/healthz", operation_id="health", response_model=s.Health, tags=["service"])
async def health(request: Request) -> s.Health:
    runtime = rt(request)
    # a ConfigurationError (500) if the lifespan never launched it; a front end runs nothing: no executor ("")
    executor_id = "" if runtime.is_front_end else runtime.executor_id
    url = runtime.settings.database_url if runtime.settings is not None else ""
    return s.Health(status="ok", executor_id=executor_id, database="sqlite" if is_sqlite(url) else "postgresql")


@router.get("/executors", operation_id="list_executors", response_model=list[s.ExecutorOut], tags=["service"], responses=_errors(403))
async def list_executors(request: Request, caller: Caller) -> list[s.ExecutorOut]:
    """Every executor with its lease, pending runs and takeovers (the ``operator`` role only)."""
    if caller.authenticated and "operator" not in caller.roles:
        raise ForbiddenError(f"{caller.name!r} may not list executors (that takes the operator role)", detail={"roles": sorted(caller.roles)})
    return [wire.executor_out(row) for row in await asyncio.to_thread(rt(request).reader.executors)]


@router.get("/agents", operation_id="list_agents", response_model=list[s.AgentOut], tags=["service"], responses=_errors())
async def list_agents(request: Request, caller: Caller) -> list[s.AgentOut]:
    return [await views.agent_out(a) for a in rt(request).agents.values()]


@router.get("/sessions", operation_id="list_sessions", response_model=list[s.SessionSummary], tags=["sessions"], responses=_errors())
async def list_sessions(
    request: Request,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    status: Annotated[str | None, Query(max_length=32, description="Only sessions in this status.", json_schema_extra=TEXT)] = None,
    agent: Annotated[str | None, Query(max_length=200, description="Only this agent's sessions.", json_schema_extra=TEXT)] = None,
) -> list[s.SessionSummary]:
    """The newest sessions first: the caller's own, or every session for an operator or approver."""
    owner = None if caller.sees_all else caller.name
    rows = await asyncio.to_thread(rt(request).reader.sessions, limit, owner=owner, status=status, agent_name=agent)
    return [wire.summary_out(r) for r in rows]


@router.post("/sessions", operation_id="start_session", status_code=202, response_model=s.RunOut, tags=["sessions"], responses=_errors(404, 409))
async def start_session(request: Request, caller: Caller, req: s.StartSession, wait: Wait = 0) -> LedgerJSONResponse:
    """Start a session owned by the caller (or, with an existing ``session_id`` the caller owns, a new turn of it).

    With authentication on, a ``session_id`` that is not one of the caller's sessions must be in its
    namespace (``<name>:...``); any other is 404, whether free or another principal's.
    """
    check_sizes(request, req)
    runtime = rt(request)
    if req.session_id is not None and caller.authenticated:
        try:
            owner: str | Literal[False] | None = (await asyncio.to_thread(runtime.reader.summary, req.session_id)).get("owner")
        except SessionNotFoundError:
            owner = False
        auth.check_chosen_id(caller, req.session_id, owner)
    handle = await runtime.start_async(req.agent, req.message, session_id=req.session_id, owner=caller.owner, priority=req.priority)
    return respond(await _settle(runtime, handle, wait), 202)


@router.get("/sessions/{session_id}", operation_id="get_session", response_model=s.SessionOut, tags=["sessions"], responses=_errors(403, 404))
async def read_session(request: Request, caller: Caller, session_id: SessionId) -> LedgerJSONResponse:
    await _allowed(request, caller, session_id, "read")
    return respond(views.session_out(await rt(request).session_async(session_id)))


@router.post("/sessions/{session_id}/turns", operation_id="new_turn", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(403, 404, 409))
async def new_turn(request: Request, caller: Caller, session_id: SessionId, req: s.NewTurn, wait: Wait = 0) -> LedgerJSONResponse:
    """A new user message. Calls of an unanswered step are paired ``outcome_unknown`` before it."""
    check_sizes(request, req)
    runtime = rt(request)
    row = await _allowed(request, caller, session_id, "turn")
    handle = await runtime.start_async(str(row["agent_name"]), req.message, session_id=session_id, owner=row.get("owner"), priority=req.priority)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/resume", operation_id="resume_session", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(403, 404, 409))
async def resume(request: Request, caller: Caller, session_id: SessionId, req: Annotated[s.Resume, Body()] = s.ResumeContinue(), wait: Wait = 0) -> LedgerJSONResponse:
    """``continue`` recovers the saved step; ``with_message`` redirects it; ``from_checkpoint`` rewinds to a saved append."""
    check_sizes(request, req)
    runtime = rt(request)
    await _allowed(request, caller, session_id, "resume")
    message = req.message if isinstance(req, s.ResumeWithMessage) else None
    checkpoint = req.checkpoint_id if isinstance(req, s.ResumeFromCheckpoint) else None
    handle = await runtime.resume_async(session_id, mode=req.mode, message=message, checkpoint_id=checkpoint, priority=req.priority)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/retry", operation_id="retry_session", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(403, 404, 409))
async def retry(request: Request, caller: Caller, session_id: SessionId, req: Annotated[s.Retry, Body()] = s.RetryRecover(), wait: Wait = 0) -> LedgerJSONResponse:
    """After a failed or interrupted run: recover it, or redirect it with a message (optionally at a checkpoint)."""
    check_sizes(request, req)
    runtime = rt(request)
    await _allowed(request, caller, session_id, "retry")
    checkpoint = req.checkpoint_id if isinstance(req, s.RetryFromCheckpoint) else None
    handle = await runtime.retry_async(session_id, message=req.message, checkpoint_id=checkpoint, priority=req.priority)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/stop", operation_id="stop_session", status_code=202, response_model=s.StopOut, tags=["entries"], responses=_errors(403, 404, 409))
async def stop(request: Request, caller: Caller, session_id: SessionId, req: s.Stop = s.Stop(), wait: Wait = 0) -> Any:
    """Record a durable stop. A suspended run stops at once; a running one at its next boundary.

    With ``?wait=``, answer once the run has come to rest (or the time is up): ``status`` is then the
    run's own (``interrupted``, ``failed``...) instead of ``stop_requested``.
    """
    runtime = rt(request)
    await _allowed(request, caller, session_id, "stop")
    receipt = await runtime.stop_async(session_id, kind=req.kind, requested_by=caller.actor)
    if wait > 0 and not receipt.stopped:
        with contextlib.suppress(RunTimeoutError):
            final = await runtime.wait_run_async(receipt.run_id, wait)
            receipt = dataclasses.replace(receipt, status=final.status, stopped=final.status == "interrupted" or final.error_code == "run_stopped")
    return s.StopOut.model_validate(receipt)


@router.post("/sessions/{session_id}/calls/{dispatch_id}/approval", operation_id="approve_call", response_model=s.AnswerOut, tags=["answers"], responses=_errors(403, 404, 409))
async def approve(request: Request, caller: Caller, session_id: SessionId, dispatch_id: DispatchId, req: s.Approval, wait: Wait = 0) -> LedgerJSONResponse:
    """Approve or deny a call waiting for approval; the recorded actor is the authenticated caller."""
    runtime = rt(request)
    await _allowed(request, caller, session_id, "approve")
    receipt = await runtime.approve_async(session_id, dispatch_id, approved=req.approved, reason=req.reason, actor=caller.actor, priority=req.priority)
    return respond(await _answered(runtime, receipt, wait))


@router.post("/sessions/{session_id}/calls/{dispatch_id}/result", operation_id="submit_call_result", response_model=s.AnswerOut, tags=["answers"], responses=_errors(403, 404, 409))
async def submit_result(request: Request, caller: Caller, session_id: SessionId, dispatch_id: DispatchId, req: Annotated[s.ClientResult, Body()], wait: Wait = 0) -> LedgerJSONResponse:
    """Answer a client-tool call with exactly one of its ``result`` or its ``error``."""
    check_sizes(request, req)
    runtime = rt(request)
    await _allowed(request, caller, session_id, "submit")
    if isinstance(req, s.ClientFailed):
        receipt = await runtime.submit_tool_result_async(session_id, dispatch_id, error=req.error, priority=req.priority)
    else:
        receipt = await runtime.submit_tool_result_async(session_id, dispatch_id, result=req.result, priority=req.priority)
    return respond(await _answered(runtime, receipt, wait))


@router.get("/runs/{run_id}", operation_id="get_run", response_model=s.RunOut, tags=["sessions"], responses=_errors(404))
async def read_run(request: Request, caller: Caller, run_id: Annotated[str, Path(min_length=1, max_length=64, json_schema_extra=TEXT)]) -> LedgerJSONResponse:
    session = await asyncio.to_thread(rt(request).reader.session_of_run, run_id)
    try:
        auth.check(caller, session.get("owner"), "read", str(session["session_id"]))
    except SessionNotFoundError:
        raise RunNotFoundError(f"no run {run_id!r}") from None
    return respond(views.run_out(await rt(request).get_run_async(run_id)))


@router.get(
    "/sessions/{session_id}/events",
    operation_id="stream_session_events",
    tags=["sessions"],
    response_class=EventStream,
    responses={200: {"description": "SSE: `id` is the event seq."}, **stream_errors(403, 404)},
)
async def session_events(
    request: Request,
    caller: Caller,
    session_id: SessionId,
    follow: Annotated[bool, Query(description="Keep the stream open after the run comes to rest.")] = False,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="Resume after this seq (Last-Event-ID wins).")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", pattern=events.CURSOR_PATTERN, description=f"Resume after this event id (an integer from 0 to {MAX_SEQ}).")] = None,
) -> EventStream:
    """The session's ledger events, each exactly once and in order, resumable with ``Last-Event-ID``."""
    reader = rt(request).reader
    cursor = events.parse_cursor(last_event_id, after)
    await _allowed(request, caller, session_id, "read")
    first = await asyncio.to_thread(reader.events, session_id, cursor, events.PAGE)  # a 404 before the stream starts
    stopping = functools.partial(is_stopping, request.app)  # a Ctrl-C ends the stream instead of cutting it (service/http.py)
    return EventStream(events.stream(reader, session_id, cursor, follow, first, stopping, request.app.state.service_settings.sse_poll_sec), headers=EventStream.HEADERS)

