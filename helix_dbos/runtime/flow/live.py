"""Live model output: the text and tool-call deltas of a model request while it streams.

Best-effort by design, beside the durable ledger events (which stay exactly-once): deltas are
written from inside the model step to the run workflow's DBOS stream ``helix.live``, so any process
on the database can read them (the worker running the run need not be the one serving the client).
A step is at-least-once, so a model request re-run after a crash streams again under a new
``request`` id; a recovered step whose reply DBOS recorded is never re-run, so a saved reply is
never streamed as if new. Every value carries ``"best_effort": true``.

On when ``Runtime(live_output=True)`` or ``HELIX_DBOS_LIVE_OUTPUT=1``: each flush is one write, at most
every ``FLUSH_SEC`` while deltas come, and within ``FLUSH_SEC`` of the last one when the model pauses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal, NotRequired, TypedDict

from dbos import DBOS
from dbos import error as dbos_error
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)

from ...definitions import Agent
from ...definitions.context import RunScope
from ...ledger.names import LIVE_STREAM

FLUSH_SEC = 0.1
log = logging.getLogger("helix_dbos")


class TextDelta(TypedDict):
    """Text the model added to its part ``index``."""

    kind: Literal["text"]
    index: int
    text: str


class ToolCallDelta(TypedDict):
    """A tool call's name and argument text as they stream (either may be empty in one delta)."""

    kind: Literal["tool_call"]
    index: int
    tool_name: str
    args: str


LiveDelta = TextDelta | ToolCallDelta


class LiveValue(TypedDict):
    """One value of the run's ``helix.live`` stream, as readers get it back (JSON through DBOS).

    ``start`` and ``end`` bracket one model request (``request``, fresh per attempt); ``deltas``
    carries what streamed since the previous flush."""

    best_effort: Literal[True]
    step: int
    request: str
    type: Literal["start", "deltas", "end"]
    deltas: NotRequired[list[LiveDelta]]


def _delta(event: object) -> LiveDelta | None:
    """One stream event as JSON; thinking and other parts are not streamed."""
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart):
            return {"kind": "text", "index": event.index, "text": part.content}
        if isinstance(part, ToolCallPart):
            args = part.args if isinstance(part.args, str) else (None if part.args is None else part.args_as_json_str())
            return {"kind": "tool_call", "index": event.index, "tool_name": part.tool_name, "args": args or ""}
    if isinstance(event, PartDeltaEvent):
        d = event.delta
        if isinstance(d, TextPartDelta):
            return {"kind": "text", "index": event.index, "text": d.content_delta}
        if isinstance(d, ToolCallPartDelta):
            args = d.args_delta if isinstance(d.args_delta, str) or d.args_delta is None else json.dumps(d.args_delta)
            return {"kind": "tool_call", "index": event.index, "tool_name": d.tool_name_delta or "", "args": args or ""}
    return None


async def _write(value: LiveValue) -> None:
    try:
        await DBOS.write_stream_async(LIVE_STREAM, value)
    except Exception:  # best effort: a lost delta never fails the model step
        log.debug("live output write failed", exc_info=True)


async def streamed_request(agent: Agent, messages: list[ModelMessage], instructions: str | None, scope: RunScope, step: int) -> ModelResponse:
    """The model request, streamed through the agent (``Agent.stream``); the reply is the same
    ``ModelResponse`` a plain request returns. ``start`` is written with the first event, so an
    agent that cannot stream (it makes a plain request and hands no event) writes nothing."""
    request = uuid.uuid4().hex[:12]
    buffer: list[LiveDelta] = []
    flushed = time.monotonic()
    started = False
    writing = asyncio.Lock()  # one write at a time, in order: the events and the flusher both write

    def value(kind: Literal["start", "deltas", "end"]) -> LiveValue:
        out: LiveValue = {"best_effort": True, "step": step, "request": request, "type": kind}
        if kind == "deltas":
            out["deltas"] = buffer
        return out

    async def flush() -> None:
        nonlocal buffer, flushed
        async with writing:
            if buffer:
                await _write(value("deltas"))
            buffer, flushed = [], time.monotonic()

    async def flusher() -> None:
        """Deltas a model sent before it paused go out within ``FLUSH_SEC``, not with its next event."""
        while True:
            await asyncio.sleep(FLUSH_SEC)
            if buffer and time.monotonic() - flushed >= FLUSH_SEC:
                await flush()

    timer: asyncio.Task[None] | None = None

    async def events(event: object) -> None:
        nonlocal started, timer
        if not started:  # a model that cannot stream makes a plain request and sends no event
            started = True
            async with writing:
                await _write(value("start"))
            timer = asyncio.create_task(flusher())
        delta = _delta(event)
        if delta is not None:
            buffer.append(delta)
        if buffer and time.monotonic() - flushed >= FLUSH_SEC:
            await flush()

    try:
        response = await agent.stream(messages, instructions, scope, events)
    finally:
        if timer is not None:
            async with writing:  # never cancelled mid-write: a delta is written once
                timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timer
    if not started:
        return response
    await flush()
    await _write(value("end"))
    return response


#: How often a reader without DBOS's notifications (a front end's ``DBOSClient``) looks for new values.
CLIENT_POLL_SEC = 0.1


def read(run_id: str, timeout: float | None = None, client: Any = None) -> Iterator[LiveValue]:
    """The run's live values in order, until its workflow ends (any process on the database).

    ``client``: a ``DBOSClient`` to read through, for a front end (``mode="client"``), which launches
    no DBOS; the stream is rows of the system database either way. ``timeout`` bounds the wait for
    each value (``TimeoutError`` past it, whichever reads)."""
    values = DBOS.read_stream(run_id, LIVE_STREAM, timeout_seconds=timeout) if client is None else (
        client.read_stream(run_id, LIVE_STREAM, timeout_seconds=timeout, polling_interval_sec=CLIENT_POLL_SEC))
    try:
        yield from values
    except dbos_error.DBOSStreamTimeoutError as exc:
        raise TimeoutError(str(exc)) from exc


async def read_async(run_id: str, timeout: float | None = None, client: Any = None) -> AsyncIterator[LiveValue]:
    """``read`` for an event loop (the service's server-sent events)."""
    values = DBOS.read_stream_async(run_id, LIVE_STREAM, timeout_seconds=timeout) if client is None else (
        client.read_stream_async(run_id, LIVE_STREAM, timeout_seconds=timeout, polling_interval_sec=CLIENT_POLL_SEC))
    try:
        async for value in values:
            yield value
    except dbos_error.DBOSStreamTimeoutError as exc:
        raise TimeoutError(str(exc)) from exc
