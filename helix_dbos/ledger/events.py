"""The ``events`` table: a session's event stream, appended in the writer's own transaction.

The stream is exactly what the ledger holds because every fact writes its event in the
transaction that records it; the sequence number comes from the session row's counter, bumped in
the same statement, so a reader resuming after N never skips an event that commits later.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, cast

import sqlalchemy as sa

from . import tables as t
from .records import EventRow
from .rows import fetch_all, now

#: ``Connection.info``'s key for the events a transaction holds back until its end (``one_bump``).
_HELD: Final = "helix_held_events"
#: One held event: session, run, type, data.
_Held = tuple[str, str | None, str, dict[str, Any]]


@contextmanager
def one_bump(conn: sa.Connection) -> Iterator[None]:
    """The events that ``conn``'s writes emit inside the block are appended at its end, in the order
    emitted, one statement and one bump of the session's counter per session (Postgres; SQLite,
    whose bump is a trigger under the database's one write lock, emits as it goes).

    For a transaction of several writes of one session (a group commit's gates or results): each
    write's own event bumped the session row again, a new row version (and WAL) per write, and a
    re-lock of the new version by the next write's fence. Held back, the block's writes lock the
    row once and it is bumped once. The numbers are what they would have been: the events are
    numbered in the order emitted, the row stays locked to the transaction's end (the fence took
    it first), and nothing reads the events back inside the transaction. A block that raises
    appends nothing (its transaction rolls back anyway)."""
    if conn.dialect.name != "postgresql" or _HELD in conn.info:
        yield
        return
    kept: list[_Held] = []
    info = conn.info  # the dict itself: a connection lost inside the block may not answer ``conn.info`` again
    info[_HELD] = kept
    try:
        yield
    finally:
        info.pop(_HELD, None)  # never raises over the block's own error (a store outage is retried by its type)
    _append_held(conn, kept)


def _append_held(conn: sa.Connection, kept: list[_Held]) -> None:
    """``kept`` in order, each run of events of one session and run in one statement (``emit_many``'s)."""
    start = 0
    for i in range(1, len(kept) + 1):
        if i == len(kept) or kept[i][:2] != kept[start][:2]:
            session_id, run_id = kept[start][:2]
            _emit_many_now(conn, session_id, run_id, [(h[2], h[3]) for h in kept[start:i]])
            start = i


def holding(conn: sa.Connection) -> bool:
    """Whether ``conn`` is inside ``one_bump`` (its events held back to the block's end)."""
    return _HELD in conn.info


def held(conn: sa.Connection, session_id: str, run_id: str | None, type_: str, data: Mapping[str, Any]) -> bool:
    """Hold the event back for ``one_bump``'s end when ``conn`` is inside one (True), else False:
    for a write that folds its event into a statement of its own (``attempts``), which then runs
    the statement without it."""
    pending: list[_Held] | None = conn.info.get(_HELD)
    if pending is None:
        return False
    pending.append((session_id, run_id, type_, dict(data)))
    return True


def append_held(conn: sa.Connection) -> None:
    """Append the events held so far (``one_bump``) now: for a statement that numbers events of its
    own from the session's counter (``step_rows``), so theirs come after the held ones."""
    pending: list[_Held] | None = conn.info.get(_HELD)
    if pending:
        _append_held(conn, pending[:])
        pending.clear()


def emit(conn: sa.Connection, session_id: str, run_id: str | None, type_: str, data: Mapping[str, Any]) -> int | None:
    """Append an event in the writer's own transaction, so the stream is exactly what the ledger holds.

    One statement. The sequence number comes from the session row's counter, bumped in the same
    statement (Postgres: a writable CTE, which takes the row's lock; SQLite: the trigger of
    migration 0010, under the database's one write lock): events of one session commit in sequence
    order, so a reader resuming after N never skips an event that commits later. Inside
    ``one_bump`` it is held back to the block's end, and its number is not known here (None).
    """
    if held(conn, session_id, run_id, type_, data):
        return None
    # ``p_*`` names, not column names: on Postgres the statement holds an UPDATE of sessions too,
    # and a key named like a column would become a SET of that UPDATE as well.
    params = {"w_session_id": session_id, "p_run_id": run_id, "p_type": type_, "p_data": dict(data), "p_created_at": now()}
    return int(conn.execute(emit_statement(conn.dialect.name == "postgresql"), params).scalar_one())


@functools.cache
def emit_statement(postgres: bool) -> sa.Insert:
    """``emit``'s one statement (binds ``w_session_id``, ``p_run_id``, ``p_type``, ``p_data``,
    ``p_created_at``), for a write that folds its event into a statement of its own (``attempts``)."""
    if postgres:
        bumped = (
            t.sessions.update()
            .where(t.sessions.c.session_id == sa.bindparam("w_session_id"))
            .values(event_seq=t.sessions.c.event_seq + 1)
            .returning(t.sessions.c.event_seq)
            .cte("bumped")
        )
        seq_source: Any = sa.select(bumped.c.event_seq).scalar_subquery()
    else:
        seq_source = sa.select(t.sessions.c.event_seq + 1).where(t.sessions.c.session_id == sa.bindparam("w_session_id")).scalar_subquery()
    stmt = t.events.insert().values(
        session_id=sa.bindparam("w_session_id"), seq=seq_source, run_id=sa.bindparam("p_run_id"), type=sa.bindparam("p_type"),
        data=sa.bindparam("p_data"), created_at=sa.bindparam("p_created_at"),
    ).returning(t.events.c.seq)
    return stmt.add_cte(bumped) if postgres else stmt


def emit_many(conn: sa.Connection, session_id: str, run_id: str | None, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Append several events of one session in order, in one statement (``emit``'s rules).

    Postgres: the session's counter is bumped once by their number and the rows are numbered from
    it (``unnest ... WITH ORDINALITY``). SQLite: one executemany of the insert, each row reading
    the counter its predecessor's trigger bumped.
    """
    if not events:
        return
    pending: list[_Held] | None = conn.info.get(_HELD)
    if pending is not None:  # after what ``one_bump`` holds, in order
        pending.extend((session_id, run_id, kind, dict(data)) for kind, data in events)
        return
    _emit_many_now(conn, session_id, run_id, events)


def _emit_many_now(conn: sa.Connection, session_id: str, run_id: str | None, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    ts = now()
    if conn.dialect.name == "postgresql":
        conn.execute(_emit_many_pg(), {"w_session_id": session_id, "p_run_id": run_id, "p_created_at": ts, **emit_many_params(events)})
        return
    conn.execute(
        _emit_sqlite_many(),
        [{"w_session_id": session_id, "p_run_id": run_id, "p_type": kind, "p_data": dict(data), "p_created_at": ts} for kind, data in events],
    )


@functools.cache
def _emit_sqlite_many() -> sa.Insert:
    seq_source = sa.select(t.sessions.c.event_seq + 1).where(t.sessions.c.session_id == sa.bindparam("w_session_id")).scalar_subquery()
    return t.events.insert().values(
        session_id=sa.bindparam("w_session_id"), seq=seq_source, run_id=sa.bindparam("p_run_id"), type=sa.bindparam("p_type"),
        data=sa.bindparam("p_data"), created_at=sa.bindparam("p_created_at"),
    )


@functools.cache
def _emit_many_pg() -> sa.Insert:
    return emit_many_pg(sa.bindparam("w_session_id"), sa.bindparam("p_run_id"), sa.bindparam("p_created_at"))


def emit_many_pg(session_id: sa.BindParameter[Any], run_id: sa.BindParameter[Any], created_at: sa.BindParameter[Any]) -> sa.Insert:
    """``emit_many``'s Postgres statement over the caller's binds for the session, the run and the
    time (``p_count``, ``p_types``, ``p_datas`` are its own), for a statement that appends its
    events beside writes of its own (``step_rows``)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    count = sa.bindparam("p_count", type_=sa.Integer)
    bumped = (
        t.sessions.update()
        .where(t.sessions.c.session_id == session_id)
        .values(event_seq=t.sessions.c.event_seq + count)
        .returning(t.sessions.c.event_seq)
        .cte("bumped")
    )
    rows = sa.func.unnest(
        sa.bindparam("p_types", type_=ARRAY(sa.String)), sa.bindparam("p_datas", type_=ARRAY(t.events.c.data.type))
    ).table_valued("type", "data", with_ordinality="ord").render_derived(name="listed")
    numbered = sa.select(
        sa.type_coerce(session_id, t.events.c.session_id.type),
        bumped.c.event_seq - count + rows.c.ord,
        sa.type_coerce(run_id, t.events.c.run_id.type),
        rows.c.type,
        rows.c.data,
        sa.type_coerce(created_at, t.events.c.created_at.type),
    ).select_from(bumped).join(rows, sa.true())
    stmt = t.events.insert().from_select(["session_id", "seq", "run_id", "type", "data", "created_at"], numbered)
    return stmt.add_cte(bumped)


def emit_many_params(events: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    return {"p_count": len(events), "p_types": [e[0] for e in events], "p_datas": [dict(e[1]) for e in events]}


def events_after(conn: sa.Connection, session_id: str, after: int = 0, limit: int = 500) -> list[EventRow]:
    return cast("list[EventRow]", fetch_all(
        conn,
        sa.select(t.events)
        .where(t.events.c.session_id == session_id, t.events.c.seq > after)
        .order_by(t.events.c.seq)
        .limit(limit),
    ))
