"""Write cost: database transactions, statements and round trips, counted with SQLAlchemy events.

Why events and not server statistics: DBOS's background threads (queue pollers, the notification
listener, the jobs thread) hit the same database all the time, so `pg_stat_database` deltas would
mix their polling into the per-step cost. Events fire on the thread that issues the statement, so
those threads are counted apart (`background`) and the rest is exactly what the runs cost.

Counted per engine (the runtime's sync engine, the datasource's async engine, DBOS's system DB):
* `tx` - transactions that executed at least one statement (an empty `begin()` costs nothing on
  the wire: psycopg sends BEGIN lazily with the first statement);
* `stmts` - statements (`before_cursor_execute`; an `executemany` is one);
* `checkouts` - pool checkouts; on an engine with `pool_pre_ping=True` each costs a `SELECT 1`;
* `rtt` - estimated client/server round trips on Postgres: statements + BEGIN + COMMIT/ROLLBACK
  per transaction + one ping per checkout where pre-ping is on. (psycopg 3 sends BEGIN as its own
  command; a rollback of an already-idle connection sends nothing and is not counted.)
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

BACKGROUND_MARKERS = (
    "queue-worker-",
    "(queue_thread)",
    "(run_notification_listener)",
    "(run_notifier)",
    "dbos-background-jobs",
    "(dynamic_scheduler_loop)",
    "(_loop)",
    "AutoUpgrade",
    "helix-executor-lock-",
    "helix-takeover-",
)
"""DBOS's polling threads, and helix's lease/lock watchdog and takeover watcher: what they do runs
on a clock, not because a run asked (the two-worker case aside), so a run's cost leaves it out and
the idle section counts it."""

_TABLE_RE = re.compile(r'\b(?:FROM|INTO|UPDATE|JOIN)\s+(?:"?(\w+)"?\.)?"?(\w+)"?', re.IGNORECASE)


def base_engine(engine: Any) -> sa.Engine:
    """The root `Engine` of an `AsyncEngine` or an `execution_options()` copy (events go on the root)."""
    engine = getattr(engine, "sync_engine", engine)
    while getattr(engine, "_proxied", None) is not None:
        engine = engine._proxied
    return engine


def is_background_thread(name: str) -> bool:
    return any(marker in name for marker in BACKGROUND_MARKERS)


def statement_tables(statement: str) -> str:
    """The first table a statement touches, schema stripped (`calls`, `operation_outputs`, ...)."""
    m = _TABLE_RE.search(statement)
    if m is None:
        head = statement.strip().split(None, 1)
        return head[0].upper() if head else "?"
    return m.group(2)


@dataclass
class EngineCounts:
    tx: int = 0
    stmts: int = 0
    checkouts: int = 0
    by_table: Counter[str] = field(default_factory=Counter)

    def rtt(self, pre_ping: bool) -> int:
        return self.stmts + 2 * self.tx + (self.checkouts if pre_ping else 0)

    def minus(self, other: EngineCounts) -> EngineCounts:
        return EngineCounts(self.tx - other.tx, self.stmts - other.stmts, self.checkouts - other.checkouts, self.by_table - other.by_table)

    def copy(self) -> EngineCounts:
        return EngineCounts(self.tx, self.stmts, self.checkouts, Counter(self.by_table))


class DbCounter:
    """Attach to named engines; `snapshot()` before and after the work, subtract.

    Thread-safe enough for counting: each increment happens under one lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fg: dict[str, EngineCounts] = {}
        self.bg: dict[str, EngineCounts] = {}
        self.pre_ping: dict[str, bool] = {}
        self._listeners: list[tuple[Any, str, Any]] = []

    def attach(self, label: str, engine: Any) -> None:
        root = base_engine(engine)
        self.fg.setdefault(label, EngineCounts())
        self.bg.setdefault(label, EngineCounts())
        self.pre_ping[label] = bool(getattr(root.pool, "_pre_ping", False))

        def bucket() -> EngineCounts:
            return (self.bg if is_background_thread(threading.current_thread().name) else self.fg)[label]

        def on_begin(conn: sa.Connection) -> None:
            conn.info["bench_stmts"] = 0

        def on_end(conn: sa.Connection) -> None:
            if conn.info.pop("bench_stmts", 0):
                with self._lock:
                    bucket().tx += 1

        def on_execute(conn: sa.Connection, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
            if "bench_stmts" in conn.info:
                conn.info["bench_stmts"] += 1
            with self._lock:
                b = bucket()
                b.stmts += 1
                b.by_table[statement_tables(statement)] += 1

        def on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
            with self._lock:
                bucket().checkouts += 1

        for target, name, fn in (
            (root, "begin", on_begin),
            (root, "commit", on_end),
            (root, "rollback", on_end),
            (root, "before_cursor_execute", on_execute),
            (root.pool, "checkout", on_checkout),
        ):
            event.listen(target, name, fn)
            self._listeners.append((target, name, fn))

    def detach(self) -> None:
        for target, name, fn in self._listeners:
            try:
                event.remove(target, name, fn)
            except sa.exc.InvalidRequestError:  # engine already disposed and its events gone
                pass
        self._listeners.clear()

    def snapshot(self) -> dict[str, EngineCounts]:
        with self._lock:
            return {k: v.copy() for k, v in self.fg.items()}

    @staticmethod
    def delta(after: dict[str, EngineCounts], before: dict[str, EngineCounts]) -> dict[str, EngineCounts]:
        return {k: after[k].minus(before.get(k, EngineCounts())) for k in after}


def totals(counts: dict[str, EngineCounts], pre_ping: dict[str, bool], labels: Iterable[str] | None = None) -> dict[str, int]:
    keys = list(labels) if labels is not None else list(counts)
    return {
        "tx": sum(counts[k].tx for k in keys),
        "stmts": sum(counts[k].stmts for k in keys),
        "checkouts": sum(counts[k].checkouts for k in keys),
        "rtt": sum(counts[k].rtt(pre_ping.get(k, False)) for k in keys),
    }


def dbos_system_engine() -> sa.Engine:
    """DBOS's system-database engine (a private attribute: reached through helix_dbos's one door to DBOS's internals)."""
    from helix_dbos.runtime.process.dbos_private import system_database_engine

    return system_database_engine()


def attach_standard(counter: DbCounter, runtime: Any = None) -> None:
    """DBOS's system DB, plus (when a helix runtime is launched) its sync engine and datasource engine."""
    counter.attach("dbos_sys", dbos_system_engine())
    if runtime is not None:
        counter.attach("helix_sync", runtime.engine)
        runner = runtime._launched.runner  # the parts its launch composed (runtime/face/launched.py)
        counter.attach("helix_ds", runner.tx_engine)
        lock = runner.lock  # Postgres: the executor lock's own connection
        if lock is not None and getattr(lock, "_engine", None) is not None:
            counter.attach("helix_lock", lock._engine)
