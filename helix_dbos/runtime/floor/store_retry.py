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

A wait for one of the pool's connections is not an outage: a worker holding more runs in flight
than its ``tx_pool`` has connections (the normal state at scale) makes runs queue for a connection,
each for as long as the runs ahead of it hold theirs, while the database answers every one of them.
So a try's bound on the server starts when it holds a connection (``ledger.engine.WaitBound``), and
a checkout that timed out (SQLAlchemy's ``pool_timeout``: every connection in use) is tried again at
once without opening the window: the wait goes on, as DBOS's own pool waits, until a connection is
free. A real outage still ends it: connections in use fail within the bound and come back to the
pool, and the next try meets the outage itself (a refused connect, a silent server), which counts.

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

from ...errors import HelixError, StoreUnavailableError
from ...ledger.engine import WaitBound, bounded_waits, explain_database_error

T = TypeVar("T")
log = logging.getLogger("helix_dbos")

_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "database is busy")


def is_pool_wait(exc: BaseException) -> bool:
    """A checkout from the pool that timed out: every connection is in use (busy, not an outage)."""
    return isinstance(exc, sa.exc.TimeoutError)


def is_transient(exc: BaseException) -> bool:
    """A store error that goes away by itself: worth retrying the whole transaction."""
    if is_pool_wait(exc):
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


def _database_error(exc: BaseException) -> BaseException | None:
    """The driver's (or SQLAlchemy's) error ``exc`` is or wraps (DBOS and Alembic raise through)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (sa.exc.SQLAlchemyError, sqlite3.Error)) or type(current).__module__.startswith("psycopg"):
            return current
        current = current.__cause__ or current.__context__
    return None


def launch_refusal(exc: BaseException) -> HelixError | None:
    """A launch's failure on the database as the typed error the CLI prints for it, or None.

    A launch tries the database once (no ``store_retry_window``: a process that cannot reach its
    database at start is told so at once, its supervisor restarts it): a database that does not
    exist, a login refused, a server that cannot be reached (refused, unknown host, or silent past
    libpq's ``connect_timeout``) is a ``configuration_error`` saying what to check, as the CLI's
    commands and ``helix-dbos serve`` print it; any other transient error (a connection dropped
    mid-launch) is ``store_unavailable``. Never the driver's 37-frame traceback.
    """
    if isinstance(exc, HelixError):
        return None
    found = _database_error(exc)
    if found is None:
        return None
    explained = explain_database_error(found)
    if explained is not None:
        return explained
    if is_transient(found) or isinstance(getattr(found, "orig", found), sqlite3.OperationalError):
        return StoreUnavailableError("the database did not answer while the runtime launched; a launch tries once: launch again once it answers", detail=f"{type(getattr(found, 'orig', None) or found).__name__}: {first_line(found)}")
    return None


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

    def __init__(self, what: str, window: float, per_try: float | None = None) -> None:
        self.what = what
        self.window = window
        #: how long one try may wait on the server when the window is endless (``try_bound``): the
        #: runtime's ``store_retry_window``, handed in by the caller
        self.per_try = window if per_try is None else per_try
        self.deadline: float | None = None
        self.delay = _FIRST_DELAY

    def try_bound(self) -> WaitBound | None:
        """How long a try may wait on the server, counted from each checkout of a pooled connection.

        With no window (``math.inf``: retried until the store answers) each try is still bounded by
        the configured window (``per_try``), so one connection stuck on a silent peer is abandoned
        and the next try gets a new one, instead of waiting on it for ever. Once an outage began, no
        wait goes past the window's end."""
        if math.isinf(self.window):
            return None if math.isinf(self.per_try) else WaitBound(max(self.per_try, 1.0))
        # never under a second: a caller's nearly spent wait must not turn every read into a timeout
        return WaitBound(max(self.window, 1.0), self.deadline)

    def next_delay(self, exc: BaseException, started: float | None = None) -> float:
        """How long to wait before the next try (``started``: when the failed try began, or last
        checked a connection out of the pool); raises
        ``StoreUnavailableError`` once the window is spent. A pool checkout that timed out is tried
        again at once, and neither opens the window nor ends it (``is_pool_wait``): every connection
        is held by a try that the database answers or that fails within its own bound, so the wait
        ends either with a connection or with the next try meeting the outage itself. Ending it on a
        pool wait turned 200 starts racing on one SQLite file into ``store_unavailable`` once a
        busy lock had opened the window, while the database answered every one of them."""
        now = time.monotonic()
        if is_pool_wait(exc):
            log.info("no pooled connection free while %s (every one in use): still waiting for one", self.what)
            return 0.0
        if self.deadline is None:
            self.deadline = min(now, started if started is not None else now) + self.window
            log.warning("database unavailable while %s (%s); retrying for up to %gs", self.what, first_line(exc), self.window)
        if now >= self.deadline:
            log.error("database still unavailable after %gs while %s: giving up (store_unavailable)", self.window, self.what)
            raise unavailable(self.what, self.window, exc) from exc
        delay = min(self.delay, self.deadline - now)
        self.delay = min(self.delay * 2, _MAX_DELAY)
        return delay


async def retrying(what: str, attempt: Callable[[], Awaitable[T]], window: float, per_try: float) -> T:
    """Run ``attempt`` (one whole transaction) until it succeeds, a non-transient error, or the window
    ends (``math.inf``: until the store answers). Each try's waits on the server are bounded
    (``Backoff.try_bound``, by ``per_try``: the runtime's ``store_retry_window``, passed in by the
    caller): silence counts as an outage too."""
    backoff = Backoff(what, window, per_try)
    while True:
        bound = backoff.try_bound()
        try:
            with bounded_waits(bound):  # copied into the try's worker thread
                value = await attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            await asyncio.sleep(backoff.next_delay(exc, bound.started if bound is not None else None))
            continue
        if backoff.deadline is not None:
            log.warning("database reachable again while %s", what)
        return value


def retrying_sync(what: str, attempt: Callable[[], T], window: float) -> T:
    """``retrying`` for callers' threads (the API's waits), with the runtime's window passed in."""
    backoff = Backoff(what, window)
    while True:
        bound = backoff.try_bound()
        try:
            with bounded_waits(bound):
                return attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            time.sleep(backoff.next_delay(exc, bound.started if bound is not None else None))


