"""Riding out a store outage: which database errors are transient, and the bounded retry around them.

A database that restarts, fails over or drops connections for a few seconds must not fail a run,
and must never make the runtime answer a call ``outcome_unknown`` when the only thing lost was a
write. Transient errors (connection refused or dropped, connection timeouts, serialization failures
and deadlocks, SQLite busy/locked) are retried with backoff for up to ``store_retry_window`` seconds
from the first failure; past that the caller gets a ``StoreUnavailableError`` (``store_unavailable``),
which the run workflow records as its failure code once the store is back.

A store that stops answering without closing anything (a frozen server, a link that holds the
bytes) raises nothing: each try of a transaction with a finite window therefore runs under
``ledger.engine.bounded_waits``, so a connection that waits for the server past the window's end is
closed and the try fails like a lost connection; the window counts from the start of the first try
that failed, so a try that hung for the whole window ends it at once.

DBOS itself retries its system-database writes without a deadline (``db_retry``): those pause the
run until the store returns, which is the same outcome as a short outage inside the window. This
module bounds the waits helix_dbos owns: every ledger transaction (``durable.tx`` retries past the
window, until the store answers; ``durable.plain_tx`` within it) and the API's waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import sqlalchemy as sa

from ...errors import StoreUnavailableError
from ...ledger.engine import bounded_waits

T = TypeVar("T")
log = logging.getLogger("helix_dbos")

_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "database is busy")


def is_transient(exc: BaseException) -> bool:
    """A store error that goes away by itself: worth retrying the whole transaction."""
    if isinstance(exc, sa.exc.TimeoutError):  # pool checkout timed out: connections are all stuck
        return True
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:  # SQLAlchemy saw a disconnect
        return True
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        return any(text in str(orig).lower() for text in _SQLITE_TRANSIENT)
    sqlstate = str(getattr(orig, "sqlstate", None) or "")
    if sqlstate in ("40001", "40P01", "25P03"):  # serialization failure, deadlock, idle-session timeout
        return True
    if sqlstate.startswith(("08", "53")):  # connection exception, insufficient resources
        return True
    if sqlstate.startswith("57") and sqlstate != "57014":  # operator intervention (admin shutdown), not a cancel
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg ships with helix_dbos
        return False
    # A psycopg OperationalError with no SQLSTATE never reached the server: connect failed or the link broke.
    return isinstance(orig, psycopg.OperationalError) and not sqlstate


def _window() -> float:
    from .registry import env

    return env().settings.store_retry_window


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def unavailable(what: str, window: float, exc: BaseException) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"the database was unavailable for more than {window:g}s (store_retry_window) while {what}",
        detail=f"{type(getattr(exc, 'orig', None) or exc).__name__}: {first_line(exc)}",
    )


class Backoff:
    """Delays of one retry window: doubling from 50 ms to 2 s, never past the window's end."""

    def __init__(self, what: str, window: float | None = None) -> None:
        self.what = what
        self.window = _window() if window is None else window
        self.deadline: float | None = None
        self.delay = _FIRST_DELAY

    def try_until(self, started: float) -> float | None:
        """By when a try started at ``started`` must hear from the server.

        With no window (``math.inf``: retried until the store answers) each try is still bounded by
        the configured window, so one connection stuck on a silent peer is abandoned and the next
        try gets a new one, instead of waiting on it for ever."""
        if math.isinf(self.window):
            return started + max(_window(), 1.0)
        # never under a second: a caller's nearly spent wait must not turn every read into a timeout
        return self.deadline if self.deadline is not None else started + max(self.window, 1.0)

    def next_delay(self, exc: BaseException, started: float | None = None) -> float:
        """How long to wait before the next try (``started``: when the failed try began); raises
        ``StoreUnavailableError`` once the window is spent."""
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = min(now, started if started is not None else now) + self.window
            log.warning("database unavailable while %s (%s); retrying for up to %gs", self.what, first_line(exc), self.window)
        if now >= self.deadline:
            log.error("database still unavailable after %gs while %s: giving up (store_unavailable)", self.window, self.what)
            raise unavailable(self.what, self.window, exc) from exc
        delay = min(self.delay, self.deadline - now)
        self.delay = min(self.delay * 2, _MAX_DELAY)
        return delay


async def retrying(what: str, attempt: Callable[[], Awaitable[T]], window: float | None = None) -> T:
    """Run ``attempt`` (one whole transaction) until it succeeds, a non-transient error, or the window
    ends (``store_retry_window`` unless given; ``math.inf``: until the store answers). Each try's
    waits on the server are bounded (``Backoff.try_until``): silence counts as an outage too."""
    backoff = Backoff(what, window)
    failed = False
    while True:
        started = time.monotonic()
        try:
            with bounded_waits(backoff.try_until(started)):  # copied into the try's worker thread
                value = await attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            failed = True
            await asyncio.sleep(backoff.next_delay(exc, started))
            continue
        if failed:
            log.warning("database reachable again while %s", what)
        return value


def retrying_sync(what: str, attempt: Callable[[], T], window: float) -> T:
    """``retrying`` for callers' threads (the API's waits), with the runtime's window passed in."""
    backoff = Backoff(what, window)
    while True:
        started = time.monotonic()
        try:
            with bounded_waits(backoff.try_until(started)):
                return attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            time.sleep(backoff.next_delay(exc, started))


