"""The one way to read the ledger: sessions, runs, waits, events, calls and executors.

``Runtime``, the HTTP service and the CLI all read through a ``Reader`` over an engine, so a read
means the same everywhere (which keys a view holds, what "at rest" is, what a missing id raises).
It never writes and never needs DBOS: the CLI's reads run beside a live service on a bare engine.
The value types it returns live apart, in ``helix_dbos/views.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from typing import Any, TypeVar

import sqlalchemy as sa

from ...errors import CallNotFoundError, RunNotFoundError, RunTimeoutError, SessionNotFoundError
from ...ledger import calls as call_rows
from ...ledger import events, prefixes, runs
from ...ledger import messages as message_rows
from ...ledger import sessions as session_rows
from ...views import (
    CallRecord,
    EventPage,
    EventRecord,
    ExecutorRecord,
    MessageRecord,
    RunRecord,
    RunResult,
    SessionSummary,
    SessionView,
    pick,
)
from ..floor.handoff import Handoff
from ..floor.reads import at_rest, read_result, read_session, session_summary
from ..floor.store_retry import retrying_sync

T = TypeVar("T")

#: Events one ``events()`` read returns at most; a stream reads page after page.
EVENT_PAGE = 500


class Reader:
    """Read-only queries over ``engine``, each in its own short connection.

    ``store_retry_window``: how long a read or a wait rides out a database outage (dropped or
    refused connections, a silent server, SQLite busy) before it raises ``StoreUnavailableError``
    (``store_unavailable``), the same window the runs' own transactions have: a caller polling
    ``session()`` through a failover sees the answer late, never a driver's exception. None (the
    CLI's bare reader): one try, the driver's error as it is, for the CLI to explain.
    """

    def __init__(self, engine: sa.Engine, *, store_retry_window: float | None = None, settled: Handoff[str, RunResult] | None = None) -> None:
        self.engine = engine
        self.store_retry_window = store_retry_window
        #: The launched runtime's results of runs brought to rest here: a wait wakes on them.
        self.settled = settled

    def _sleeper(self, run_id: str | None) -> Callable[[float], None]:
        return time.sleep if self.settled is None or run_id is None else self.settled.sleeper(run_id)

    def _read(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn`` in a short connection, tried again through an outage for ``store_retry_window``."""
        if self.store_retry_window is None:
            return self._read_once(fn)
        return retrying_sync("reading the ledger", lambda: self._read_once(fn), self.store_retry_window)

    def _read_once(self, fn: Callable[[sa.Connection], T]) -> T:
        with self.engine.connect() as conn:
            return fn(conn)

    # --- sessions ------------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionView:
        return self._read(lambda conn: read_session(conn, session_id))

    def summary(self, session_id: str) -> SessionSummary:
        """The session's row as a list shows it (owner, agent, status): what an ownership check reads."""
        return self._read(lambda conn: session_summary(conn, session_id))

    def session_of_run(self, run_id: str) -> SessionSummary:
        """The session a run belongs to; ``RunNotFoundError`` for an unknown run."""

        def read(conn: sa.Connection) -> SessionSummary:
            run = runs.get_run(conn, run_id)
            session = session_rows.get_session(conn, run["session_id"]) if run is not None else None
            if session is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            return pick(SessionSummary, session)  # type: ignore[no-any-return]

        return self._read(read)

    def sessions(self, limit: int = 50, *, owner: str | None = None, status: str | None = None, agent_name: str | None = None) -> list[SessionSummary]:
        """The newest sessions first; ``owner``/``status``/``agent_name`` narrow the list when given."""
        rows = self._read(lambda conn: session_rows.list_sessions(conn, limit, owner=owner, status=status, agent_name=agent_name))
        return [pick(SessionSummary, r) for r in rows]

    def session_ids_starting(self, prefix: str, limit: int = 50) -> list[str]:
        """Session ids that start with ``prefix`` (tables print ids shortened; a user types a prefix)."""
        return self._read(lambda conn: prefixes.session_ids_starting(conn, prefix, limit))

    def messages(self, session_id: str) -> list[MessageRecord]:
        """The active transcript as stored, one record a message (``SessionView.messages`` loads them)."""
        rows = self._read(lambda conn: message_rows.active_messages(conn, session_id))
        return [pick(MessageRecord, r) for r in rows]

    # --- runs and waits ------------------------------------------------------------------------

    def runs(self, session_id: str) -> list[RunRecord]:
        """A session's runs in order (``seq``)."""
        return self._read(lambda conn: [pick(RunRecord, r) for r in runs.list_runs(conn, session_id)])

    def run(self, run_id: str) -> RunResult:
        return self._read(lambda conn: read_result(conn, run_id))

    def wait_run(self, run_id: str, timeout: float | None = None, *, ended: Future[Any] | None = None) -> RunResult:
        """The run once at rest; ``RunTimeoutError`` if it is not by ``timeout`` (None: no limit).

        ``ended``: the future of the run's workflow when this process started it; the wait then
        sleeps on it instead of polling the ledger (see ``poll``), and once it resolves takes the
        result the run's last transaction read for this process, if it did (``handoff.py``).
        """
        handoff = self.settled
        settled = (lambda: handoff.take(run_id)) if ended is not None and handoff is not None else None
        result: RunResult = poll(lambda: self._read_once(lambda conn: at_rest(conn, run_id)), timeout, f"run {run_id}", self.store_retry_window, ended=ended, settled=settled,
                    sleep=self._sleeper(run_id))
        return result

    def wait(self, session_id: str, timeout: float | None = None) -> RunResult:
        """The session's latest run once it is at rest (also a run a relaunch recovered)."""

        sleepers: dict[str | None, Callable[[float], None]] = {}
        current: list[str | None] = [None]

        def check(conn: sa.Connection) -> RunResult | None:
            session = session_rows.get_session(conn, session_id)
            if session is None:
                raise SessionNotFoundError(f"no session {session_id!r}")
            current[0] = session["current_run_id"]
            if session["current_run_id"] is None:
                return None
            return at_rest(conn, session["current_run_id"])

        def sleep(delay: float) -> None:  # woken by the current run coming to rest in this process
            run_id = current[0]
            if run_id not in sleepers:
                sleepers[run_id] = self._sleeper(run_id)
            sleepers[run_id](delay)

        return poll(lambda: self._read_once(check), timeout, f"session {session_id}", self.store_retry_window, sleep=sleep)

    # --- events --------------------------------------------------------------------------------

    def events(self, session_id: str, after: int = 0, limit: int = EVENT_PAGE) -> EventPage:
        """The session's status and newest seq, then the events after ``after``.

        The session row is read first: if it is at rest with newest seq S, the events read next
        include every seq up to S (the at-rest ``run_status`` event commits with the status change).
        """

        def read(conn: sa.Connection) -> EventPage:
            session = session_rows.get_session(conn, session_id)
            if session is None:
                raise SessionNotFoundError(f"no session {session_id!r}")
            rows = events.events_after(conn, session_id, after, limit=limit)
            return EventPage(session["status"], int(session["event_seq"]), [pick(EventRecord, r) for r in rows])

        return self._read(read)

    # --- calls and executors -------------------------------------------------------------------

    def calls(self, *, session_id: str | None = None, status: str | None = None, tool_name: str | None = None, limit: int = 500) -> list[CallRecord]:
        """Calls as stored, oldest first, narrowed by session, status and tool when given."""
        rows = self._read(lambda conn: call_rows.list_calls(conn, session_id=session_id, status=status, tool_name=tool_name, limit=limit))
        return [pick(CallRecord, r) for r in rows]

    def call(self, dispatch_id: str) -> CallRecord:
        row = self._read(lambda conn: call_rows.get_call(conn, dispatch_id))
        if row is None:
            raise CallNotFoundError(f"no call {dispatch_id!r}")
        return pick(CallRecord, row)  # type: ignore[no-any-return]

    def dispatch_ids_starting(self, session_id: str, prefix: str, limit: int = 50) -> list[str]:
        return self._read(lambda conn: prefixes.dispatch_ids_starting(conn, session_id, prefix, limit))

    def executors(self) -> list[ExecutorRecord]:
        """Every executor with its lease, the workflows DBOS still holds pending for it, and its takeovers."""
        from ..process.leases import list_executors

        return [pick(ExecutorRecord, r) for r in self._read(list_executors)]

    def executor_ever_ran(self, executor_id: str) -> bool:
        return bool(self._read(lambda conn: runs.count_of_executor(conn, executor_id)))


#: While a run's workflow is under way in this process, the wait reads the ledger after this long,
#: then twice as long each time up to ``ENDED_SLICE_MAX`` (a run can come to rest before its workflow
#: ends: a stop that ends it from outside, an entry that takes a dead run over). A run that ends
#: within the first slice costs its caller one read, when its workflow's future resolves.
ENDED_SLICE, ENDED_SLICE_MAX = 1.0, 5.0


def poll(
    check: Callable[[], T | None],
    timeout: float | None,
    what: str,
    store_retry_window: float | None = None,
    *,
    ended: Future[Any] | None = None,
    settled: Callable[[], T | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Poll ``check`` until it returns non-None; short at first, so a fast run returns fast.

    ``ended``: a future that resolves when whatever ``check`` waits for has most likely happened
    (the run's in-process workflow). The wait sleeps on it, reading only after each slice
    (``ENDED_SLICE`` doubling to ``ENDED_SLICE_MAX``), and reads at once when it resolves: a caller of a run started here pays one ledger
    read, not a poll every few milliseconds, or none when ``settled`` gives what the workflow's own
    last transaction read once it has resolved. After that, plain polling takes over (the ledger
    is the judge of "at rest", not the workflow's end).

    ``sleep``: the pause between reads (a ``handoff.Handoff.sleeper`` ends it when the run comes to
    rest in this process).

    With ``store_retry_window``, a database outage does not end the wait: the run being waited for
    rides it out too (or fails ``store_unavailable`` once the store is back), so transient errors
    are retried until ``timeout``, or for the window when the wait has no timeout. Past
    ``timeout``: ``RunTimeoutError`` (a ``TimeoutError`` too), the run going on regardless.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.005
    slice_ = ENDED_SLICE
    while True:
        if ended is not None:
            budget = slice_ if deadline is None else max(min(slice_, deadline - time.monotonic()), 0.0)
            futures.wait([ended], budget)
            slice_ = min(slice_ * 2, ENDED_SLICE_MAX)
            if ended.done():
                ended = None
                value = settled() if settled is not None else None
                if value is not None:
                    return value
        if store_retry_window is None:
            value = check()
        else:
            window = store_retry_window if deadline is None else max(deadline - time.monotonic(), 0.0)
            value = retrying_sync(f"waiting for {what}", check, window)
        if value is not None:
            return value
        if deadline is not None and time.monotonic() >= deadline:
            raise RunTimeoutError(f"timed out waiting for {what} (it goes on; wait again to see its end)", detail={"waiting_for": what, "timeout": timeout})
        if ended is None:
            sleep(delay)
            delay = min(delay * 1.5, 0.25)
