"""The ``events`` table: a session's event stream, appended in the writer's own transaction.

The stream is exactly what the ledger holds because every fact writes its event in the
transaction that records it; the sequence number comes from the session row's counter, bumped in
the same statement, so a reader resuming after N never skips an event that commits later.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import EventRow
from .rows import fetch_all, now


def emit(conn: sa.Connection, session_id: str, run_id: str | None, type_: str, data: Mapping[str, Any]) -> int:
    """Append an event in the writer's own transaction, so the stream is exactly what the ledger holds.

    One statement. The sequence number comes from the session row's counter, bumped in the same
    statement (Postgres: a writable CTE, which takes the row's lock; SQLite: the trigger of
    migration 0010, under the database's one write lock): events of one session commit in sequence
    order, so a reader resuming after N never skips an event that commits later.
    """
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
