"""Writers of one SQLite file take turns in this process, in the order they asked.

SQLite has one writer at a time, and a writer that finds the lock taken waits in SQLite's busy
handler: it sleeps, looks again, sleeps longer (up to 100 ms), with no queue. Under many writers at
once (200 HTTP starts of one session on the service's pool) the ones that happen to look at the
wrong moments lose every time: a start waited out two 30 s busy timeouts and the retry window ended
it ``store_unavailable`` while the database committed hundreds of others' transactions.

So a connection that is about to begin a write transaction first takes this process's turn for the
file, first come first served, and gives it back when the transaction ends (commit, rollback, the
connection's return to the pool or its loss). SQLite's own lock and busy handler then only arbitrate
between processes (DBOS's own engine, the CLI, another runtime on the file), where the wait is short.
Readers take no turn: WAL lets them read beside the writer.

A turn not given within the busy timeout fails the statement as SQLite would (``database is
locked``), so a try is bounded as before and the store's retry treats it as the same transient wait.
"""

from __future__ import annotations

import collections
import itertools
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

log = logging.getLogger("helix_dbos")

#: how long a writer waits for its turn: SQLite's ``busy_timeout`` on the ledger's connections
TURN_TIMEOUT = 30.0

_HOLDS = "helix_sqlite_turn"  # key in the pooled connection's ``info``: the turn it holds
#: statements pysqlite runs without beginning a transaction (it begins one before any other)
_READ_ONLY = ("SELECT", "PRAGMA", "EXPLAIN")


class Turns:
    """A first-come-first-served lock whose holder may release it from any thread.

    Each waiter has its own event; a release hands the turn to the oldest waiter directly, so no
    late arrival can take it in between (SQLite's busy handler has no such order). Each take has a
    token, and only the token holding the turn gives it back: a connection closed behind
    SQLAlchemy's back (``forfeit``) and then returned to the pool gives nothing twice."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held_by: int | None = None
        self._waiting: collections.deque[tuple[threading.Event, int]] = collections.deque()

    @property
    def held(self) -> bool:
        return self._held_by is not None

    def take(self, token: int, timeout: float) -> bool:
        with self._mutex:
            if self._held_by is None:
                self._held_by = token
                return True
            mine = (threading.Event(), token)
            self._waiting.append(mine)
        if mine[0].wait(timeout):
            return True
        with self._mutex:
            if mine[0].is_set():  # handed over just as the wait ended
                return True
            self._waiting.remove(mine)
            return False

    def give(self, token: int) -> None:
        with self._mutex:
            if self._held_by != token:  # given back already
                return
            if self._waiting:
                event, self._held_by = self._waiting.popleft()  # stays held: the next writer has it now
                event.set()
            else:
                self._held_by = None


_by_file: dict[str, Turns] = {}
_by_file_lock = threading.Lock()
_tokens = itertools.count(1)
#: the turn each DBAPI connection holds, by ``id()`` (a sqlite3 connection takes no weak reference)
_holding: dict[int, tuple[Turns, int]] = {}


def turns_for(path: Path) -> Turns:
    """This process's turns for one SQLite file (every engine on the file shares them)."""
    key = str(path.resolve())
    with _by_file_lock:
        return _by_file.setdefault(key, Turns())


def _begins_write(statement: str) -> bool:
    head = statement.lstrip()[:8].upper()
    return not head.startswith(_READ_ONLY)


def _give_back(info: dict[str, Any]) -> None:
    held = info.pop(_HOLDS, None)
    if held is not None:
        turns, token, key = held
        if _holding.get(key, (None, None))[1] == token:
            _holding.pop(key, None)
        turns.give(token)


def forfeit(dbapi_conn: Any) -> None:
    """Give back the turn ``dbapi_conn`` holds, if any: it is being closed behind SQLAlchemy's back
    (the shutdown abandoning a transactional body that never returned), so no commit, rollback or
    return to the pool will say that its transaction ended."""
    held = _holding.pop(id(dbapi_conn), None)
    if held is not None:
        held[0].give(held[1])


def install(engine: sa.Engine, path: Path) -> None:
    """Make ``engine``'s writers take turns on ``path`` (see the module's docstring)."""
    turns = turns_for(path)

    def before(conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if dbapi_conn is None or dbapi_conn.in_transaction or _HOLDS in conn.info or not _begins_write(statement):
            return
        token = next(_tokens)
        if not turns.take(token, TURN_TIMEOUT):
            log.info("no write turn on the SQLite file within %gs (another writer of this process holds it)", TURN_TIMEOUT)
            # what SQLite's busy handler says at its timeout: the store's retry knows it as transient
            raise sqlite3.OperationalError("database is locked")
        conn.info[_HOLDS] = (turns, token, id(dbapi_conn))
        _holding[id(dbapi_conn)] = (turns, token)

    def after(conn: sa.Connection, *_: Any) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if _HOLDS in conn.info and (dbapi_conn is None or not dbapi_conn.in_transaction):
            _give_back(conn.info)  # the statement began no transaction (or ended it)

    def failed(context: sa.engine.ExceptionContext) -> None:
        conn = context.connection
        if conn is None or _HOLDS not in conn.info:
            return
        dbapi_conn = conn.connection.dbapi_connection if not conn.invalidated else None
        if dbapi_conn is None or not dbapi_conn.in_transaction:
            _give_back(conn.info)

    def ended(conn: sa.Connection) -> None:
        # just before the driver's commit or rollback: the next writer's BEGIN may meet the lock for
        # the commit's few milliseconds, which the busy handler rides out
        _give_back(conn.info)

    def returned(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            _give_back(record.info)

    def reset(dbapi_conn: Any, record: Any, _reset_state: Any) -> None:
        returned(dbapi_conn, record)

    def invalidated(dbapi_conn: Any, record: Any, _exc: Any) -> None:
        returned(dbapi_conn, record)

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "handle_error", failed)
    event.listen(engine, "commit", ended)
    event.listen(engine, "rollback", ended)
    event.listen(engine.pool, "checkin", returned)
    event.listen(engine.pool, "reset", reset)
    event.listen(engine.pool, "invalidate", invalidated)
    event.listen(engine.pool, "close", returned)
