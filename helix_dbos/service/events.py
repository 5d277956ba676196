"""Live session events over Server-Sent Events, read from the ledger's ``events`` table.

The stream is the table, not an in-process bus: every event was committed in the same transaction
as the ledger change it reports, with a per-session ``seq`` assigned under the session row's lock.
So a client that reconnects with ``Last-Event-ID: N`` — to this process or to one restarted after a
crash — gets exactly the events after N: none twice (the table holds each once) and none missing
(seq N committed means every seq below N did). Polling is deliberate: it works the same on Postgres
and SQLite and needs no listener that a crash could lose.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from ..errors import ValidationError
from ..ledger.statuses import RUN_AT_REST
from ..runtime.face.reader import EVENT_PAGE, Reader
from ..views import EventPage, EventRecord
from .responses import finite

PAGE = EVENT_PAGE
#: Event seqs are 32-bit integers on Postgres; a larger cursor names no event and is refused.
MAX_SEQ = 2**31 - 1
#: ``Last-Event-ID`` as the schema publishes it: an integer-like string (its range is checked by
#: ``parse_cursor``; empty means from the start, as a browser's first ``EventSource`` request has none).
CURSOR_PATTERN = r"^[ \t]*[0-9]{0,10}[ \t]*$"
KEEPALIVE_SEC = 15.0


def parse_cursor(last_event_id: str | None, after: int | None) -> int:
    """Where to resume: the ``Last-Event-ID`` header wins over ``?after=``; both are event seqs."""
    if last_event_id is None or last_event_id.strip() == "":
        return after or 0
    try:
        value = int(last_event_id.strip())
    except ValueError:
        raise ValidationError("Last-Event-ID must be an event id (a non-negative integer)", detail={"last_event_id": last_event_id}) from None
    if value < 0 or value > MAX_SEQ:
        raise ValidationError(f"Last-Event-ID must be an event id (an integer from 0 to {MAX_SEQ})", detail={"last_event_id": last_event_id})
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def frame(row: EventRecord) -> bytes:
    data = {
        "seq": row["seq"],
        "session_id": row["session_id"],
        "run_id": row["run_id"],
        "type": row["type"],
        "data": row["data"],
        "created_at": row["created_at"],
    }
    try:
        text = json.dumps(data, default=_json_default, allow_nan=False)
    except ValueError:  # a NaN a tool returned: null, as a browser's JSON.parse needs (responses.py)
        text = json.dumps(finite(data), default=_json_default)
    return f"id: {row['seq']}\nevent: {row['type']}\ndata: {text}\n\n".encode()


def end_frame(status: str, last: int) -> bytes:
    """The last frame of a stream that ends at rest; it has no id, so Last-Event-ID stays the last event."""
    return f"event: end\ndata: {json.dumps({'status': status, 'last_event_id': last})}\n\n".encode()


async def stream(
    reader: Reader,
    session_id: str,
    after: int,
    follow: bool,
    first: EventPage | None = None,
    stopping: Callable[[], bool] = lambda: False,
    interval: float = 0.1,
) -> AsyncIterator[bytes]:
    """Yield SSE frames from ``after`` on; end once the session is at rest and drained (unless following),
    or when the service is ``stopping`` (a Ctrl-C: the client reconnects with ``Last-Event-ID``).

    Each page is ``reader.events``: the session's status and newest seq are read before its events,
    so a stream that has delivered the newest seq of a session at rest has delivered everything.
    ``interval``: seconds between polls (``HELIX_DBOS_SSE_POLL_SEC``, on the service's settings).
    """
    last = after
    quiet = 0.0
    yield b"retry: 1000\n\n"
    while True:
        page = first if first is not None else await asyncio.to_thread(reader.events, session_id, last, PAGE)
        first = None
        status, top, rows = page.status, page.last_seq, page.events
        for row in rows:
            yield frame(row)
            last = int(row["seq"])
        if len(rows) == PAGE:
            continue
        if not follow and status in RUN_AT_REST and last >= top:
            yield end_frame(status, last)
            return
        if stopping():
            return
        if rows:
            quiet = 0.0
        else:
            quiet += interval
            if quiet >= KEEPALIVE_SEC:
                quiet = 0.0
                yield b": keep-alive\n\n"
        await asyncio.sleep(interval)
