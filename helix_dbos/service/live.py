"""``GET /sessions/{id}/live``: the model's text and tool-call deltas over SSE, best-effort.

Beside ``/events`` (the durable ledger events, exactly once and resumable), never instead of it:
these values come from the run workflow's DBOS stream (``runtime/flow/live.py``), written by whichever
worker runs the step and read here from the database (``Runtime.live``), so the serving process need
not be the worker: a front end, which launches no DBOS, reads them through its ``DBOSClient``. They carry no ``id``: a reconnect starts again from the first value of the run.

A stop signal to the service (Ctrl-C, SIGTERM: ``app.state.stopping``, service/http.py) ends an open
stream within one poll, as it ends ``/events`` streams, and without the ``end`` frame (the run did
not end): waiting on the next value alone, the stream held uvicorn's shutdown for its whole 5 s grace
and was then cut with an ASGI traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from ..errors import RunNotFoundError, SessionNotFoundError
from ..runtime import Runtime
from .http import is_stopping
from .responses import EventStream
from .routes import TEXT, Caller, SessionId, _allowed, known_query, stream_errors

router = APIRouter(dependencies=[Depends(known_query)])


def _run_of(request: Request, session_id: str, run_id: str | None) -> str | None:
    """The run to stream: the session's current one, or ``run_id`` if it is one of the session's
    (another session's run is not found here, whoever asks)."""
    reader = request.app.state.runtime.reader
    session = reader.summary(session_id)  # SessionNotFoundError for an unknown session
    if run_id is None:
        current: str | None = session["current_run_id"]
        return current
    try:
        owner = reader.session_of_run(run_id)
    except RunNotFoundError:
        owner = None
    if owner is None or owner["session_id"] != session_id:
        raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}")
    return run_id


async def _sse(runtime: Runtime, run_id: str, timeout: float, stopping: Callable[[], bool] = lambda: False, interval: float = 0.1) -> AsyncIterator[bytes]:
    """The run's live values as SSE frames, then ``end``; on ``stopping`` (checked every ``interval``
    seconds while no value comes) the stream ends at once, without ``end``."""
    yield f"event: run\ndata: {json.dumps({'run_id': run_id, 'best_effort': True})}\n\n".encode()
    values = runtime.live_async(run_id, timeout=timeout)
    try:
        while not stopping():
            following = asyncio.ensure_future(anext(values))
            while not following.done():
                await asyncio.wait({following}, timeout=interval)
                if not following.done() and stopping():
                    following.cancel()
                    with contextlib.suppress(BaseException):  # its cancellation, or whatever it ended with meanwhile
                        await following
                    return
            try:
                value = following.result()
            except (StopAsyncIteration, TimeoutError):
                break  # the run's workflow ended, or the caller's ?timeout= ran out: the end frame follows
            yield f"event: live\ndata: {json.dumps(value)}\n\n".encode()
        else:
            return
    finally:
        await values.aclose()
    yield b"event: end\ndata: {}\n\n"


@router.get(
    "/sessions/{session_id}/live",
    operation_id="stream_session_live",
    tags=["sessions"],
    response_class=EventStream,
    responses={200: {"description": "SSE: best-effort model output deltas, no ids."}, **stream_errors(403, 404)},
)
async def session_live(
    request: Request,
    caller: Caller,
    session_id: SessionId,
    run_id: Annotated[str | None, Query(max_length=64, description="A run of the session (default: its current run).", json_schema_extra=TEXT)] = None,
    timeout: Annotated[float, Query(gt=0, le=3600, description="Stop after this many seconds.")] = 300,
) -> EventStream:
    """The current run's model output as it streams (``Runtime(live_output=True)``); ends with the run's workflow."""
    await _allowed(request, caller, session_id, "read")  # behind the same authentication and ownership
    target = await asyncio.to_thread(_run_of, request, session_id, run_id)  # a 404 before the stream starts
    if target is None:
        raise SessionNotFoundError(f"session {session_id!r} has no run")
    stopping = functools.partial(is_stopping, request.app)  # a Ctrl-C ends the stream instead of cutting it
    interval = request.app.state.service_settings.sse_poll_sec
    return EventStream(_sse(request.app.state.runtime, target, timeout, stopping, interval), headers=EventStream.HEADERS)
