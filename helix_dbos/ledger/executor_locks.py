"""The ``helix_private.executor_locks`` table and the Postgres advisory lock it names (Postgres only).

Why one executor id is held by one process at a time, and how a lost lock is regained or ends the
process, is ``runtime/process/executor_lock.py``'s story; here are its statements. They run on the
lock's own connection, which the caller commits or rolls back.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

TABLE = "helix_private.executor_locks"

_HOLDER = sa.text(
    "SELECT has_table_privilege(a.usesysid, 'helix_private.executor_locks', 'UPDATE') AS runtime "
    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid::bigint = :hi AND l.objid::bigint = :lo"
)
_CONFIRM = sa.text(
    f"UPDATE {TABLE} SET confirmed_at = clock_timestamp() WHERE executor_id = :e AND generation = :g "
    "AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND pid = pg_backend_pid() AND classid::bigint = :hi AND objid::bigint = :lo)"
)
_INSERT = sa.text(f"INSERT INTO {TABLE} (executor_id, lock_key) VALUES (:e, :k) ON CONFLICT (executor_id) DO NOTHING")
_ROW = sa.text(
    f"SELECT lock_key, generation, host, pid, lease_seconds, EXTRACT(EPOCH FROM clock_timestamp() - confirmed_at) AS age "
    f"FROM {TABLE} WHERE executor_id = :e FOR UPDATE"
)
_TRY_LOCK = sa.text("SELECT pg_try_advisory_lock(:k)")
_UNLOCK = sa.text("SELECT pg_advisory_unlock(:k)")
_SET_KEY = sa.text(f"UPDATE {TABLE} SET lock_key = :k WHERE executor_id = :e")
_ACQUIRED = sa.text(
    f"UPDATE {TABLE} SET generation = :g, confirmed_at = clock_timestamp(), host = :h, pid = :p, "
    "lease_seconds = :l WHERE executor_id = :e"
)
_REGAINED = sa.text(f"UPDATE {TABLE} SET confirmed_at = clock_timestamp() WHERE executor_id = :e")
_RELEASED = sa.text(f"UPDATE {TABLE} SET confirmed_at = NULL WHERE executor_id = :e AND generation = :g")


def _halves(key: int) -> dict[str, int]:
    """How ``pg_locks`` shows a bigint advisory key: high and low 32 bits (classid, objid)."""
    return {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF}


def lock_row(conn: sa.Connection, executor_id: str, new_key: int) -> sa.Row[Any]:
    """The id's row (made with ``new_key`` if it has none), locked: its key, generation, last holder and age."""
    conn.execute(_INSERT, {"e": executor_id, "k": new_key})
    return conn.execute(_ROW, {"e": executor_id}).one()


def try_lock(conn: sa.Connection, key: int) -> bool:
    return bool(conn.execute(_TRY_LOCK, {"k": key}).scalar())


def unlock(conn: sa.Connection, key: int) -> None:
    conn.execute(_UNLOCK, {"k": key})


def held_by_runtime(conn: sa.Connection, key: int) -> bool:
    """Whether a session of a role that may write the table (a runtime, not an intruder) holds ``key``."""
    return any(conn.execute(_HOLDER, _halves(key)).scalars().all())


def set_key(conn: sa.Connection, executor_id: str, key: int) -> None:
    conn.execute(_SET_KEY, {"k": key, "e": executor_id})


def acquired(conn: sa.Connection, executor_id: str, generation: int, host: str, pid: int, lease: float) -> None:
    """Record this process as the id's holder at ``generation``, confirmed now."""
    conn.execute(_ACQUIRED, {"g": generation, "e": executor_id, "h": host, "p": pid, "l": lease})


def confirm(conn: sa.Connection, executor_id: str | None, generation: int | None, key: int) -> bool:
    """Confirm the lock now, if this connection still holds ``key`` at ``generation``."""
    return conn.execute(_CONFIRM, {"e": executor_id, "g": generation, **_halves(key)}).rowcount == 1


def regained(conn: sa.Connection, executor_id: str) -> None:
    conn.execute(_REGAINED, {"e": executor_id})


def released(conn: sa.Connection, executor_id: str, generation: int) -> None:
    """A clean release: the next holder need not wait out a lease."""
    conn.execute(_RELEASED, {"e": executor_id, "g": generation})
