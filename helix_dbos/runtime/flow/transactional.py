"""A transactional tool's body and its result in one database transaction: exactly once, never in doubt.

The attempt row is committed first, apart, by the attempt gate: a marker that counts the body toward
the 3-body limit and carries no effect. Then one transaction on the ledger's engine:

1. the transactional bodies' one lock, before the body's first read, so their reads and writes are
   one serializable unit on both databases: SQLite's write lock (``BEGIN IMMEDIATE``; the driver
   would otherwise begin only at the first write, after the body had read), on Postgres a
   transaction-scoped advisory lock that every transactional body takes (one at a time per
   database, as on SQLite). It is waited for by polling, never by a blocked statement: a wait
   behind a running body is not an unavailable store;
2. the body, through a ``ToolConnection`` (``ledger/body_guard.py``) that cannot commit, roll back,
   begin, or write the runtime's own tables. Its statements are not bounded by
   ``store_retry_window``: a long query is not an outage (keepalives still drop a vanished peer);
3. the run fence and the call's row, locked only now (Postgres: the session row, then the call, the
   order every run transaction keeps), so the body never holds the session's lock and the run's
   other calls write their results while it runs; the result write fenced by the attempt number;
   commit.

A crash anywhere before the commit rolls the body's writes back with the missing result; a refused
result write (a newer attempt, a lost session) rolls them back too. A body that raises is rolled
back and its error is written in a transaction of its own; a transient store error (an outage) is
not the body's error: the whole transaction is tried again within ``store_retry_window``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import traceback
import weakref
from collections.abc import Iterator
from typing import Any

import pydantic
import sqlalchemy as sa

from ...definitions import Tool, ToolContext
from ...errors import TransactionEscapedError
from ...ledger import attempts, body_guard, body_lock, sqlite_turns, tx_marks
from ...ledger import calls as call_rows
from ...ledger.engine import unbounded_waits, without_sql
from ...recovery.texts import TRANSACTION_ESCAPED
from ..floor import fence, gate, transcript
from ..floor.durable import ProcessStopping
from ..floor.records import RecordOutcome
from ..floor.registry import Registry
from ..floor.store_retry import Backoff, is_transient
from ..process.faults import crash_point
from . import tool_errors

log = logging.getLogger("helix_dbos")

_POLL_FIRST, _POLL_MAX = 0.01, 0.25


class _Refused(Exception):
    """The result write may not happen: roll the body's writes back with it."""


class _BodyRaised(Exception):
    """The body itself raised (its exception is ``__cause__``): the call's answer, not the runtime's fault."""


class _Unusable(Exception):
    """The body returned a value that cannot be a result: roll back, answer the call with an error."""


class _Escaped(Exception):
    """The body committed its transaction itself: its marker is committed and the call has no result."""


#: The DBAPI connections of the SQLite transactional bodies in flight in this process (``abandon_open``).
_open: set[Any] = set()
_open_guard = threading.Lock()


def _stopping(registry: Registry) -> bool:
    """Whether the launch this body runs for is past its shutdown's grace period (or shut down)."""
    return registry.stopping


def abandon_open() -> int:
    """The shutdown's grace period is over: close the connection of every SQLite transactional body
    still in flight, rolling its transaction back (its writes and its missing result: the next
    launch's recovery runs it again, the database proving it had no effect); how many.

    On SQLite the body's transaction holds the database's one write lock for as long as the body
    runs: a body that never returns kept every other writer of the process waiting (DBOS's own
    threads, which its destroy joins, and the lease release), so the shutdown took the sum of their
    busy timeouts. The body's thread is a daemon the exit does not wait for; whatever it does once
    abandoned fails on the closed connection and writes nothing (``_run_once`` sees the stop).
    Postgres needs none of this: the server ends the transaction when the process's connection goes."""
    with _open_guard:
        conns = list(_open)
        _open.clear()
    for dbapi_conn in conns:
        if dbapi_conn is None:  # Postgres
            continue
        sqlite_turns.forfeit(dbapi_conn)  # its writer's turn goes to the next writer (no commit will say it ended)
        with contextlib.suppress(Exception):  # already closed, or closing under a body: either way it rolled back
            dbapi_conn.close()
    return len(conns)


#: The transactional bodies of a launch take their turn here before they take a connection (one
#: lock per engine: a body a past launch of this process abandoned never held a new launch's turn).
_turns: weakref.WeakKeyDictionary[sa.Engine, threading.Lock] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def _turn(registry: Registry) -> Iterator[None]:
    """Wait for this process's one transactional body in flight to end, holding no connection.

    The database runs them one at a time anyway (``_serialize``'s lock), so a second body of the
    same process could only wait, and it used to wait holding a connection of the API engine: about
    twenty waiters exhausted its pool, and every entry and read of the process timed out behind
    them. Waiting here costs no concurrency; a stopping process's waiters give up (the body never
    started, the next launch recovers the call)."""
    with _open_guard:
        turn = _turns.setdefault(registry.env.engine, threading.Lock())
    while not turn.acquire(timeout=_POLL_MAX):
        if _stopping(registry):
            raise ProcessStopping("the process is stopping: a transactional body waiting for its turn does not start")
    try:
        yield
    finally:
        turn.release()


def _serialize(conn: sa.Connection, registry: Registry) -> None:
    """Take the transactional bodies' one lock before anything is read."""
    if conn.dialect.name == "sqlite":
        body_lock.begin_immediate(conn)
        return
    delay = _POLL_FIRST
    while not body_lock.try_lock(conn):  # the Postgres advisory lock every transactional body holds for its transaction
        if _stopping(registry):  # the body never started: the next launch recovers the call
            raise ProcessStopping("the process is stopping: a transactional body waiting for its lock does not start")
        time.sleep(delay)
        delay = min(delay * 2, _POLL_MAX)


def _body_and_result(conn: sa.Connection, registry: Registry, run_id: str, dispatch_id: str, attempt: int, tool: Tool, args: pydantic.BaseModel, ctx: ToolContext) -> RecordOutcome:
    _serialize(conn, registry)
    call = call_rows.get_call(conn, dispatch_id)  # unlocked: the fenced, locked check comes with the result write
    if call is None or call["status"] != "running" or call["attempts"] != attempt:
        raise _Refused("result write refused: a newer attempt or an answer owns the call")
    tx_marks.mark(conn, dispatch_id, attempt)  # the transaction's first write: any commit the body forces carries it
    with body_guard.guarded(conn, tool.sql_allows) as guarded, unbounded_waits():
        try:
            value = tool.invoke_sync(args, dataclasses.replace(ctx, connection=guarded))
        except Exception as exc:
            # The body's frames hold what it opened (a result, a driver cursor) for as long as the
            # exception lives: on SQLite an unfinished statement keeps a closed connection (and its
            # write lock) alive. The traceback stays; the finished frames' locals go.
            traceback.clear_frames(exc.__traceback__)
            raise _BodyRaised() from exc
    ok, value = transcript.jsonable(value)
    if not ok:
        raise _Unusable(value)
    crash_point("after_body", tool.name)  # dies with the transaction open: the body's writes never commit
    if _escaped(registry, dispatch_id, attempt):
        raise _Escaped()
    reason = fence.refused(conn, run_id)
    if reason is not None:
        raise _Refused(f"result write refused: {reason}")
    call = call_rows.get_call(conn, dispatch_id, for_update=True)
    if call is None or call["status"] != "running" or call["attempts"] != attempt:
        raise _Refused("result write refused: a newer attempt or an answer owns the call")
    tx_marks.unmark(conn, dispatch_id, attempt)
    if not attempts.record_result(conn, dispatch_id, attempt, run_id, "ok", result=value):
        raise _Refused("result write refused: a newer attempt or an answer owns the call")
    return RecordOutcome("ok", written=True)


def _escaped(registry: Registry, dispatch_id: str, attempt: int | None = None) -> bool:
    """Whether the call's marker is committed, read from a connection of its own (outside the body's
    transaction, where only a commit makes it visible): the body committed its transaction itself."""
    with registry.env.engine.connect() as conn:
        return tx_marks.committed(conn, dispatch_id, attempt)


def _answer_escaped(registry: Registry, run_id: str, dispatch_id: str, attempt: int, tool: Tool) -> RecordOutcome:
    """The body committed its effect apart from its result: the call is ``outcome_unknown`` (never
    "failed", never run again), with ``transaction_escaped`` in its error and its note."""
    log.error("run %s: transactional tool %r committed its transaction itself (call %s): answered outcome_unknown, not run again",
              run_id, tool.name, dispatch_id)
    error = {"type": TransactionEscapedError.__name__, "code": TransactionEscapedError.code, "message": TRANSACTION_ESCAPED}
    with registry.env.engine.begin() as conn:
        out = gate.record(conn, run_id, dispatch_id, attempt, "outcome_unknown", None, error)
        if out.written:
            call_rows.note_escaped(conn, dispatch_id, TRANSACTION_ESCAPED)
    return out


@contextlib.contextmanager
def _discarded_after(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection for one body, closed for good afterwards (never back to the pool): whatever the
    body changed of its session (a setting, a temporary object, a lock, a driver-level state the
    guard did not see) ends with it, and closing it rolls back whatever it left open."""
    conn = engine.connect()
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):  # already closed (``abandon_open``) or broken: it is discarded either way
            conn.invalidate()
        with contextlib.suppress(Exception):
            conn.close()


def run(registry: Registry, run_id: str, dispatch_id: str, attempt: int, tool: Tool, raw_args: Any, ctx: ToolContext) -> RecordOutcome:
    """Blocking (a worker thread): the body and its result commit together or not at all.

    A store that drops the connection under the body (an outage, a restart) rolled the body's
    writes back with it: the whole transaction, body included, is tried again within
    ``store_retry_window``, as every other ledger transaction is. Before each retry the call is
    read: a commit whose acknowledgement was lost has already answered it with this attempt, and
    then that answer stands (the body never runs twice to an effect).

    The window opens when the failure is first seen, not when the try began: a try holds the body
    and its wait for its turn, which may last longer than the window, and a connection cut at the
    end of such a body deserves its retries. (A ledger transaction's try is bounded by the window,
    so ``retrying`` counts from its start: silence there is the outage.) ``registry``: the launch
    the body runs for: its ledger engine (``Env.engine``, on which the transactional bodies' lock
    is taken), its ``store_retry_window``, and whether it is stopping."""
    engine = registry.env.engine
    backoff = Backoff(f"running transactional tool {tool.name!r}", registry.env.settings.store_retry_window)
    retried = False
    while True:
        try:
            if retried:
                with engine.connect() as conn:
                    done = _answered_by(conn, dispatch_id, attempt)
                if done is not None:
                    log.warning("run %s: transactional tool %r had committed before the store dropped the connection", run_id, tool.name)
                    return done
                if _escaped(registry, dispatch_id, attempt):  # its effect committed before the store dropped: never again
                    return _answer_escaped(registry, run_id, dispatch_id, attempt, tool)
            return _run_once(registry, run_id, dispatch_id, attempt, tool, raw_args, ctx)
        except Exception as exc:
            if not is_transient(exc):
                raise
            retried = True
            time.sleep(backoff.next_delay(exc))  # raises StoreUnavailableError past the window


def _answered_by(conn: sa.Connection, dispatch_id: str, attempt: int) -> RecordOutcome | None:
    """The call's answer if this attempt already wrote it (its commit's acknowledgement was lost)."""
    call = call_rows.get_call(conn, dispatch_id)
    if call is not None and call["attempts"] == attempt and call["status"] in ("ok", "error"):
        return RecordOutcome(call["status"], written=True)
    return None


def _run_once(registry: Registry, run_id: str, dispatch_id: str, attempt: int, tool: Tool, raw_args: Any, ctx: ToolContext) -> RecordOutcome:
    """One try: the body's transaction, or its error's; a transient store error is raised as it is."""
    engine = registry.env.engine
    try:
        args = tool.validate(raw_args)
        with _turn(registry), _discarded_after(engine) as conn:
            held = conn.connection.dbapi_connection if conn.dialect.name == "sqlite" else None
            with _open_guard:
                _open.add(held)
            try:
                # No ``with``: a body that ended the transaction leaves SQLAlchemy's in a state whose
                # rollback raises; closing the connection (``_discarded_after``) rolls back instead.
                trans = conn.begin()
                out = _body_and_result(conn, registry, run_id, dispatch_id, attempt, tool, args, ctx)
                trans.commit()
                return out
            finally:
                with _open_guard:
                    _open.discard(held)
    except _Escaped:
        return _answer_escaped(registry, run_id, dispatch_id, attempt, tool)
    except _Refused as refused:
        if _escaped(registry, dispatch_id, attempt):
            return _answer_escaped(registry, run_id, dispatch_id, attempt, tool)
        with engine.begin() as conn:
            attempts.refuse_attempt(conn, dispatch_id, attempt)
        return RecordOutcome("refused", written=False, refused=str(refused))
    except _Unusable as unusable:
        if _escaped(registry, dispatch_id, attempt):
            return _answer_escaped(registry, run_id, dispatch_id, attempt, tool)
        error = {"type": "result_not_serializable", "message": str(unusable)}
    except Exception as raised:  # its writes are rolled back, the error is its answer (logged in tool_errors)
        if _stopping(registry):  # abandoned by the shutdown (``abandon_open``): nothing is its answer, the next launch recovers it
            raise ProcessStopping(f"the process stopped under transactional tool {tool.name!r}") from raised
        exc = raised.__cause__ if isinstance(raised, _BodyRaised) and raised.__cause__ is not None else raised
        if not is_transient(exc) and _escaped(registry, dispatch_id, attempt):  # whatever it raised, its effect committed
            return _answer_escaped(registry, run_id, dispatch_id, attempt, tool)
        if is_transient(exc):
            # The store failed, not the body: nothing is written as its answer. The attempt has no
            # result (or, if a lost acknowledgement hid a commit, its result): the ledger says which.
            raise exc from None
        if exc is raised and not isinstance(exc, pydantic.ValidationError):  # not the body's (nor its arguments'): ours
            tool_errors.runtime_failed(run_id, tool.name, dispatch_id, exc, "its writes are rolled back, the error is its answer")
        else:
            tool_errors.tool_raised(run_id, tool.name, dispatch_id, exc, "its writes are rolled back, the model is answered with the error")
        error = {"type": type(exc).__name__, "message": without_sql(exc) or str(exc)}
    crash_point("after_body", tool.name)
    with engine.begin() as conn:
        return gate.record(conn, run_id, dispatch_id, attempt, "error", None, error)
