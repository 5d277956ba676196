"""The endpoints. Each one awaits a runtime ``*_async`` twin (or a thread), never blocking the loop.

Entries answer ``202 Accepted`` with the run they opened; ``?wait=SECONDS`` holds the response
until the run is at rest (completed, failed, interrupted or suspended on answers) or the time is
up, whichever is first. Progress in between is on ``GET /sessions/{id}/events``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import StreamingResponse

from ..definitions.inputs import SESSION_ID_MAX_LENGTH, SESSION_ID_PATTERN
from ..errors import SessionNotFoundError
from ..ledger import store
from ..ledger.engine import is_sqlite
from ..runtime import AnswerReceipt, RunHandle, Runtime
from . import events, views
from . import schemas as s
from .responses import LedgerJSONResponse, respond

# An explicit response class (not FastAPI's default) also takes FastAPI off its direct pydantic JSON
# path, which cannot encode a lone surrogate a tool returned (see responses.py).
router = APIRouter(default_response_class=LedgerJSONResponse)

Wait = Annotated[float, Query(ge=0, le=300, description="Seconds to wait for the run to come to rest before answering.")]
SessionId = Annotated[str, Path(min_length=1, max_length=SESSION_ID_MAX_LENGTH, pattern=SESSION_ID_PATTERN)]
DispatchId = Annotated[str, Path(min_length=1, max_length=64)]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": s.ErrorBody} for code in (400, *codes)}


def rt(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


async def _settle(runtime: Runtime, handle: RunHandle, wait: float) -> s.RunOut:
    if wait > 0:
        with contextlib.suppress(TimeoutError):  # still running after ?wait=: report it as it stands
            return views.run_out(await handle.result_async(timeout=wait))
    return views.run_out(await runtime.run_async(handle.run_id))


async def _answered(runtime: Runtime, receipt: AnswerReceipt, wait: float) -> s.AnswerOut:
    run = await _settle(runtime, receipt.run, wait) if receipt.run is not None else None
    return views.answer_out(receipt, run)


def _agent_of(runtime: Runtime, session_id: str) -> str:
    with runtime.engine.connect() as conn:
        session = store.get_session(conn, session_id)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return str(session["agent_name"])


def _sessions(runtime: Runtime, limit: int) -> list[dict[str, Any]]:
    with runtime.engine.connect() as conn:
        return store.list_sessions(conn, limit)


@router.get("/healthz", response_model=s.Health, tags=["service"])
async def health(request: Request) -> s.Health:
    runtime = rt(request)
    assert runtime.settings is not None
    return s.Health(status="ok", executor_id=runtime.executor_id, database="sqlite" if is_sqlite(runtime.settings.database_url) else "postgresql")


@router.get("/agents", response_model=list[s.AgentOut], tags=["service"])
async def list_agents(request: Request) -> list[s.AgentOut]:
    return [views.agent_out(a) for a in rt(request).agents.values()]


@router.get("/sessions", response_model=list[s.SessionSummary], tags=["sessions"], responses=_errors())
async def list_sessions(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[s.SessionSummary]:
    rows = await asyncio.to_thread(_sessions, rt(request), limit)
    return [s.SessionSummary(**{k: r[k] for k in s.SessionSummary.model_fields}) for r in rows]


@router.post("/sessions", status_code=202, response_model=s.RunOut, tags=["sessions"], responses=_errors(404, 409))
async def start_session(request: Request, req: s.StartSession, wait: Wait = 0) -> LedgerJSONResponse:
    """Start a session (or, with an existing ``session_id`` of the same agent, a new turn of it)."""
    runtime = rt(request)
    handle = await runtime.start_async(req.agent, req.message, session_id=req.session_id)
    return respond(await _settle(runtime, handle, wait), 202)


@router.get("/sessions/{session_id}", response_model=s.SessionOut, tags=["sessions"], responses=_errors(404))
async def read_session(request: Request, session_id: SessionId) -> LedgerJSONResponse:
    return respond(views.session_out(await rt(request).session_async(session_id)))


@router.post("/sessions/{session_id}/turns", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(404, 409))
async def new_turn(request: Request, session_id: SessionId, req: s.NewTurn, wait: Wait = 0) -> LedgerJSONResponse:
    """A new user message. Calls of an unanswered step are paired ``outcome_unknown`` before it."""
    runtime = rt(request)
    agent = await asyncio.to_thread(_agent_of, runtime, session_id)
    handle = await runtime.start_async(agent, req.message, session_id=session_id)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/resume", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(404, 409))
async def resume(request: Request, session_id: SessionId, req: s.Resume, wait: Wait = 0) -> LedgerJSONResponse:
    """``continue`` recovers the saved step; ``with_message`` redirects it; ``from_checkpoint`` rewinds to a saved append."""
    runtime = rt(request)
    handle = await runtime.resume_async(session_id, mode=req.mode, message=req.message, checkpoint_id=req.checkpoint_id)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/retry", status_code=202, response_model=s.RunOut, tags=["entries"], responses=_errors(404, 409))
async def retry(request: Request, session_id: SessionId, req: s.Retry, wait: Wait = 0) -> LedgerJSONResponse:
    """After a failed or interrupted run: recover it, or redirect it with a message (optionally at a checkpoint)."""
    runtime = rt(request)
    handle = await runtime.retry_async(session_id, message=req.message, checkpoint_id=req.checkpoint_id)
    return respond(await _settle(runtime, handle, wait), 202)


@router.post("/sessions/{session_id}/stop", status_code=202, response_model=s.StopOut, tags=["entries"], responses=_errors(404, 409))
async def stop(request: Request, session_id: SessionId, req: s.Stop) -> s.StopOut:
    """Record a durable stop. A suspended run stops at once; a running one at its next boundary."""
    out = await rt(request).stop_async(session_id, kind=req.kind, requested_by=req.requested_by)
    return s.StopOut(session_id=session_id, run_id=out["run_id"], stopped=out["stopped"], status=out["status"])


@router.post("/sessions/{session_id}/calls/{dispatch_id}/approval", response_model=s.AnswerOut, tags=["answers"], responses=_errors(404, 409))
async def approve(request: Request, session_id: SessionId, dispatch_id: DispatchId, req: s.Approval, wait: Wait = 0) -> LedgerJSONResponse:
    """Approve or deny a call waiting for approval; the last answer of the step continues the run."""
    runtime = rt(request)
    receipt = await runtime.approve_async(session_id, dispatch_id, approved=req.approved, reason=req.reason, actor=req.actor)
    return respond(await _answered(runtime, receipt, wait))


@router.post("/sessions/{session_id}/calls/{dispatch_id}/result", response_model=s.AnswerOut, tags=["answers"], responses=_errors(404, 409))
async def submit_result(request: Request, session_id: SessionId, dispatch_id: DispatchId, req: s.ClientResult, wait: Wait = 0) -> LedgerJSONResponse:
    """Answer a client-tool call with its result (or its error)."""
    runtime = rt(request)
    receipt = await runtime.submit_tool_result_async(session_id, dispatch_id, result=req.result, error=req.error)
    return respond(await _answered(runtime, receipt, wait))


@router.get("/runs/{run_id}", response_model=s.RunOut, tags=["sessions"], responses=_errors(404))
async def read_run(request: Request, run_id: Annotated[str, Path(min_length=1, max_length=64)]) -> LedgerJSONResponse:
    return respond(views.run_out(await rt(request).run_async(run_id)))


@router.get(
    "/sessions/{session_id}/events",
    tags=["sessions"],
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE: `id` is the event seq."}, **_errors(404)},
)
async def session_events(
    request: Request,
    session_id: SessionId,
    follow: Annotated[bool, Query(description="Keep the stream open after the run comes to rest.")] = False,
    after: Annotated[int | None, Query(ge=0, description="Resume after this seq (Last-Event-ID wins).")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """The session's ledger events, each exactly once and in order, resumable with ``Last-Event-ID``."""
    engine = rt(request).engine
    cursor = events.parse_cursor(last_event_id, after)
    first = await asyncio.to_thread(events.read, engine, session_id, cursor)  # a 404 before the stream starts
    return StreamingResponse(
        events.stream(engine, session_id, cursor, follow, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

