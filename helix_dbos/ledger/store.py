"""Queries over the ledger. Every function takes a blocking ``sa.Connection`` inside the caller's transaction.

One set of functions serves both sides: API calls run them on the runtime's engine, and the workflow
runs them in worker threads inside the workflow's exactly-once ledger transactions or short ones (an attempt gate, a result write). Nothing here
commits; the caller's transaction boundary is the unit of atomicity.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .records import (
    AttemptRow,
    CallRow,
    CheckOutcome,
    CheckpointRow,
    EndedRun,
    EventRow,
    MessageRow,
    RunRow,
    SessionRow,
)
from .rows import by_key, fetch_all, fetch_one, insert_if_absent, new_id, now
from .statuses import CALL_UNRESOLVED

__all__ = ["fetch_all", "fetch_one", "new_id", "now"]  # re-exported: every query module's helpers live in ``rows``


_by_key = by_key
_insert_if_absent = insert_if_absent


# --- sessions and runs ---------------------------------------------------------------------------


def get_session(conn: sa.Connection, session_id: str, *, for_update: bool = False) -> SessionRow | None:
    return cast("SessionRow | None", fetch_one(conn, _by_key(t.sessions, "session_id", for_update and conn.dialect.name == "postgresql"), {"w_key": session_id}))


def list_sessions(conn: sa.Connection, limit: int = 50, *, owner: str | None = None, status: str | None = None, agent_name: str | None = None) -> list[SessionRow]:
    """The newest sessions first; ``owner``/``status``/``agent_name`` narrow the list when given."""
    stmt = sa.select(t.sessions)
    if owner is not None:
        stmt = stmt.where(t.sessions.c.owner == owner)
    if status is not None:
        stmt = stmt.where(t.sessions.c.status == status)
    if agent_name is not None:
        stmt = stmt.where(t.sessions.c.agent_name == agent_name)
    return cast("list[SessionRow]", fetch_all(conn, stmt.order_by(t.sessions.c.updated_at.desc()).limit(limit)))


def _parent_owner(conn: sa.Connection, parent_dispatch_id: str) -> str | None:
    stmt = sa.select(t.sessions.c.owner).join(t.calls, t.calls.c.session_id == t.sessions.c.session_id).where(t.calls.c.dispatch_id == parent_dispatch_id)
    return conn.execute(stmt).scalar()


def insert_session(conn: sa.Connection, session_id: str, agent_name: str, parent_dispatch_id: str | None = None, *, owner: str | None = None) -> bool:
    """Create the session row; False if it exists already (a concurrent entry created it first).

    Without ``ON CONFLICT``, two entries that both found no session raced to insert it and the loser
    met a raw primary-key violation: now the loser learns it lost, and the gate refuses it typed.
    A child session inherits its parent's owner, so delegation never widens who sees it.
    """
    ts = now()
    if owner is None and parent_dispatch_id is not None:
        owner = _parent_owner(conn, parent_dispatch_id)
    result = conn.execute(
        _insert_if_absent(conn, t.sessions).values(
            session_id=session_id,
            agent_name=agent_name,
            status="new",
            version=0,
            event_seq=0,
            run_count=0,
            parent_dispatch_id=parent_dispatch_id,
            owner=owner,
            created_at=ts,
            updated_at=ts,
        )
        .returning(t.sessions.c.session_id)  # rowcount is -1 for this statement on psycopg
    )
    return result.first() is not None


def claim_session(conn: sa.Connection, session: SessionRow, run_id: str, status: str = "running") -> bool:
    """The run-start gate: one compare-and-set on the session's version. True if this entry won."""
    result = conn.execute(
        t.sessions.update()
        .where(t.sessions.c.session_id == session["session_id"], t.sessions.c.version == session["version"])
        .values(
            status=status,
            current_run_id=run_id,
            version=t.sessions.c.version + 1,
            run_count=t.sessions.c.run_count + 1,
            updated_at=now(),
        )
    )
    return result.rowcount == 1


def insert_run(conn: sa.Connection, **values: Any) -> None:
    values.setdefault("created_at", now())
    values.setdefault("status", "running")
    if values["status"] != "queued":  # started where it was admitted (a queued run: when a worker takes it)
        values.setdefault("started_at", values["created_at"])
    conn.execute(t.runs.insert().values(**values))


def start_queued_run(conn: sa.Connection, run_id: str, session_id: str, executor_id: str) -> None:
    """A worker took a ``queued`` run: it is ``running`` from now, on ``executor_id`` (the session too,
    while the run is still its current one)."""
    ts = now()
    conn.execute(t.runs.update().where(t.runs.c.run_id == run_id, t.runs.c.status == "queued").values(status="running", started_at=ts, executor_id=executor_id))
    conn.execute(
        t.sessions.update()
        .where(t.sessions.c.session_id == session_id, t.sessions.c.current_run_id == run_id, t.sessions.c.status == "queued")
        .values(status="running", updated_at=ts)
    )


def get_run(conn: sa.Connection, run_id: str) -> RunRow | None:
    return cast("RunRow | None", fetch_one(conn, _by_key(t.runs, "run_id", False), {"w_key": run_id}))


def list_runs(conn: sa.Connection, session_id: str) -> list[RunRow]:
    return cast("list[RunRow]", fetch_all(conn, sa.select(t.runs).where(t.runs.c.session_id == session_id).order_by(t.runs.c.seq)))


_END_RUN = t.runs.update().where(t.runs.c.run_id == sa.bindparam("w_run_id")).returning(t.runs.c.run_id, t.runs.c.session_id)
_END_SESSION_RUN = t.sessions.update().where(
    t.sessions.c.session_id == sa.bindparam("w_session_id"), t.sessions.c.current_run_id == sa.bindparam("w_run_id")
)


def end_run(
    conn: sa.Connection,
    run_id: str,
    status: str,
    *,
    output: Any = None,
    error_code: str | None = None,
    error: str | None = None,
    events: list[tuple[str, Mapping[str, Any]]] | None = None,
) -> EndedRun:
    """Terminal (or suspension) commit of a run, and release of the session's gate.

    Its ``run_status`` event is appended to ``events`` when given, for the caller to emit with the
    rest of its commit's (``emit_many``), and emitted here otherwise."""
    ts = now()
    if conn.dialect.name == "postgresql":
        params = {"w_run_id": run_id, "p_status": status, "p_output": output, "p_error_code": error_code, "p_error": error, "p_ts": ts}
        run = conn.execute(_end_run_pg(), params).mappings().one()
    else:
        run = conn.execute(
            _END_RUN, {"w_run_id": run_id, "status": status, "output": output, "error_code": error_code, "error": error, "ended_at": ts}
        ).mappings().one()
        conn.execute(_END_SESSION_RUN, {"w_session_id": run["session_id"], "w_run_id": run_id, "status": status, "updated_at": ts})
    event = ("run_status", {"status": status, "error_code": error_code, "error": error})
    if events is None:
        emit(conn, run["session_id"], run_id, *event)
    else:
        events.append(event)
    return cast(EndedRun, dict(run))


@functools.cache
def _end_run_pg() -> sa.Select[Any]:
    """``end_run``'s two updates as one statement (``p_*`` binds: see ``emit``)."""
    ended = (
        t.runs.update()
        .where(t.runs.c.run_id == sa.bindparam("w_run_id"))
        .values(status=sa.bindparam("p_status"), output=sa.bindparam("p_output", type_=t.runs.c.output.type),
                error_code=sa.bindparam("p_error_code"), error=sa.bindparam("p_error"), ended_at=sa.bindparam("p_ts", type_=t.runs.c.ended_at.type))
        .returning(t.runs.c.run_id, t.runs.c.session_id)
        .cte("ended")
    )
    released = (
        t.sessions.update()
        .where(t.sessions.c.session_id.in_(sa.select(ended.c.session_id)), t.sessions.c.current_run_id == sa.bindparam("w_run_id"))
        .values(status=sa.bindparam("p_status"), updated_at=sa.bindparam("p_ts", type_=t.sessions.c.updated_at.type))
        .cte("released")
    )
    return sa.select(ended.c.run_id, ended.c.session_id).add_cte(released)


_COUNT_STEP = t.runs.update().where(t.runs.c.run_id == sa.bindparam("w_run_id")).values(steps=t.runs.c.steps + 1)


def count_run_step(conn: sa.Connection, run_id: str) -> None:
    conn.execute(_COUNT_STEP, {"w_run_id": run_id})


# --- messages and checkpoints --------------------------------------------------------------------


def active_messages(conn: sa.Connection, session_id: str) -> list[MessageRow]:
    return cast("list[MessageRow]", fetch_all(
        conn,
        sa.select(t.messages.c.seq, t.messages.c.kind, t.messages.c.body, t.messages.c.run_id, t.messages.c.step)
        .where(t.messages.c.session_id == session_id, t.messages.c.superseded_by.is_(None))
        .order_by(t.messages.c.seq),
    ))




def next_message_seq() -> Any:
    """The session's (``w_session_id``) next message number, computed inside the statement that uses it."""
    top = sa.select(sa.func.coalesce(sa.func.max(t.messages.c.seq) + 1, 0)).where(t.messages.c.session_id == sa.bindparam("w_session_id"))
    return top.scalar_subquery()


_INSERT_MESSAGE = t.messages.insert().values(seq=next_message_seq()).returning(t.messages.c.seq)


def insert_message(conn: sa.Connection, session_id: str, run_id: str, step: int | None, kind: str, body: Any) -> int:
    """One statement: the number is the session's next, read by the insert itself (under the
    session's lock, which every writer of its messages holds)."""
    params = {"w_session_id": session_id, "session_id": session_id, "run_id": run_id, "step": step, "kind": kind, "body": body, "created_at": now()}
    return int(conn.execute(_INSERT_MESSAGE, params).scalar_one())


def new_checkpoint_id() -> str:
    return f"cp-{new_id()}"


_INSERT_CHECKPOINT = t.checkpoints.insert().values(message_seq=next_message_seq())


def insert_checkpoint(
    conn: sa.Connection, session_id: str, run_id: str, step: int, kind: str, checkpoint_id: str | None = None, *, with_event: bool = True
) -> str:
    """A checkpoint points at the message boundary as it stands now: it copies nothing.

    ``checkpoint_id`` may be minted earlier, so the calls saved in the same commit can name it.
    ``with_event=False`` leaves its event (``checkpoint_event``) to the caller.
    """
    checkpoint_id = checkpoint_id or new_checkpoint_id()
    conn.execute(
        _INSERT_CHECKPOINT,
        {"checkpoint_id": checkpoint_id, "session_id": session_id, "w_session_id": session_id, "run_id": run_id, "step": step, "kind": kind, "created_at": now()},
    )
    if with_event:
        emit(conn, session_id, run_id, *checkpoint_event(checkpoint_id, kind, step))
    return checkpoint_id


def checkpoint_event(checkpoint_id: str, kind: str, step: int) -> tuple[str, dict[str, Any]]:
    return "checkpoint", {"checkpoint_id": checkpoint_id, "kind": kind, "step": step}


def get_checkpoint(conn: sa.Connection, checkpoint_id: str) -> CheckpointRow | None:
    return cast("CheckpointRow | None", fetch_one(conn, sa.select(t.checkpoints).where(t.checkpoints.c.checkpoint_id == checkpoint_id)))


def list_checkpoints(conn: sa.Connection, session_id: str) -> list[CheckpointRow]:
    return cast("list[CheckpointRow]", fetch_all(
        conn,
        sa.select(t.checkpoints)
        .where(t.checkpoints.c.session_id == session_id)
        .order_by(t.checkpoints.c.created_at, t.checkpoints.c.step),
    ))


def latest_checkpoint(conn: sa.Connection, session_id: str) -> CheckpointRow | None:
    return cast("CheckpointRow | None", fetch_one(
        conn,
        sa.select(t.checkpoints)
        .where(t.checkpoints.c.session_id == session_id, t.checkpoints.c.superseded_by.is_(None))
        .order_by(t.checkpoints.c.message_seq.desc(), t.checkpoints.c.step.desc(), t.checkpoints.c.created_at.desc())
        .limit(1),
    ))


def next_step(conn: sa.Connection, session_id: str) -> int:
    top = conn.execute(
        sa.select(sa.func.max(t.checkpoints.c.step)).where(
            t.checkpoints.c.session_id == session_id, t.checkpoints.c.superseded_by.is_(None)
        )
    ).scalar()
    return 0 if top is None else int(top) + 1


def rewind_to(conn: sa.Connection, checkpoint: CheckpointRow, run_id: str) -> None:
    """Supersede (never delete) everything after ``checkpoint``: later messages and checkpoints."""
    sid = checkpoint["session_id"]
    conn.execute(
        t.messages.update()
        .where(
            t.messages.c.session_id == sid,
            t.messages.c.seq >= checkpoint["message_seq"],
            t.messages.c.superseded_by.is_(None),
        )
        .values(superseded_by=run_id)
    )
    conn.execute(
        t.checkpoints.update()
        .where(
            t.checkpoints.c.session_id == sid,
            t.checkpoints.c.superseded_by.is_(None),
            t.checkpoints.c.checkpoint_id != checkpoint["checkpoint_id"],
            sa.or_(
                t.checkpoints.c.message_seq > checkpoint["message_seq"],
                sa.and_(t.checkpoints.c.message_seq == checkpoint["message_seq"], t.checkpoints.c.step > checkpoint["step"]),
            ),
        )
        .values(superseded_by=run_id)
    )
    emit(conn, sid, run_id, "rewind", {"checkpoint_id": checkpoint["checkpoint_id"]})


# --- calls and attempts --------------------------------------------------------------------------


def insert_calls(conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        ts = now()
        conn.execute(t.calls.insert(), [{"created_at": ts, **r} for r in rows])


def calls_of_checkpoint(conn: sa.Connection, checkpoint_id: str) -> list[CallRow]:
    return cast("list[CallRow]", fetch_all(
        conn, sa.select(t.calls).where(t.calls.c.checkpoint_id == checkpoint_id).order_by(t.calls.c.position)
    ))


def get_call(conn: sa.Connection, dispatch_id: str, *, for_update: bool = False) -> CallRow | None:
    return cast("CallRow | None", fetch_one(conn, _by_key(t.calls, "dispatch_id", for_update and conn.dialect.name == "postgresql"), {"w_key": dispatch_id}))


def list_calls(
    conn: sa.Connection,
    *,
    session_id: str | None = None,
    status: str | None = None,
    tool_name: str | None = None,
    limit: int = 500,
) -> list[CallRow]:
    stmt = sa.select(t.calls)
    if session_id:
        stmt = stmt.where(t.calls.c.session_id == session_id)
    if status:
        stmt = stmt.where(t.calls.c.status == status)
    if tool_name:
        stmt = stmt.where(t.calls.c.tool_name == tool_name)
    return cast("list[CallRow]", fetch_all(conn, stmt.order_by(t.calls.c.created_at, t.calls.c.step, t.calls.c.position).limit(limit)))


def attempts_of(conn: sa.Connection, dispatch_ids: Iterable[str]) -> dict[str, list[AttemptRow]]:
    ids = list(dispatch_ids)
    out: dict[str, list[AttemptRow]] = {d: [] for d in ids}
    if ids:
        for r in cast("list[AttemptRow]", fetch_all(
            conn, sa.select(t.attempts).where(t.attempts.c.dispatch_id.in_(ids)).order_by(t.attempts.c.attempt)
        )):
            out[r["dispatch_id"]].append(r)
    return out


def close_open_attempts(conn: sa.Connection, dispatch_id: str, outcome: str = "lost") -> None:
    """Close a call's open attempts: ``lost`` when it is answered without them, or what recovery
    proved about them (``rolled_back``, ``not_applied``: no effect; ``applied``: a check confirmed it)."""
    conn.execute(
        t.attempts.update()
        .where(t.attempts.c.dispatch_id == dispatch_id, t.attempts.c.outcome.is_(None))
        .values(ended_at=now(), outcome=outcome)
    )


def attempt_by_token(conn: sa.Connection, dispatch_id: str, token: str) -> AttemptRow | None:
    """The attempt a gate execution opened (its ``token``, written with it), if its commit went through."""
    return cast("AttemptRow | None", fetch_one(conn, sa.select(t.attempts).where(t.attempts.c.dispatch_id == dispatch_id, t.attempts.c.token == token)))


def mark_decided(conn: sa.Connection, dispatch_id: str, by: str) -> None:
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(decided_by=by))


def record_check(conn: sa.Connection, call: CallRow, outcome: CheckOutcome | None) -> None:
    conn.execute(t.calls.update().where(t.calls.c.dispatch_id == call["dispatch_id"]).values(check_outcome=outcome))


def settle_call(
    conn: sa.Connection,
    call: CallRow,
    status: str,
    *,
    run_id: str,
    paired_by: str,
    note: str | None = None,
    result: Any = None,
    error: Any = None,
    reason: str = "",
) -> None:
    """Answer a call without (or instead of) a body: recovery, redirect, stop, failure or an answer.

    Any attempt still open is closed ``lost``: its body's result will never be the answer (a late
    write of it is refused and marks it ``refused``), and no attempt row stays open on a settled call.
    """
    close_open_attempts(conn, call["dispatch_id"])
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == call["dispatch_id"])
        .values(
            status=status,
            outcome_note=note,
            result=result,
            error=error,
            paired_by=paired_by,
            settled_run_id=run_id,
            ended_at=now(),
        )
    )
    emit(
        conn,
        call["session_id"],
        run_id,
        "call_paired" if paired_by != "body" else "tool_end",
        {
            "dispatch_id": call["dispatch_id"],
            "tool_name": call["tool_name"],
            "status": status,
            "note": note,
            "paired_by": paired_by,
            "reason": reason,
        },
    )


def reopen_call(conn: sa.Connection, call: CallRow) -> None:
    """retry(): undo a failed run's pairing, keeping the attempts so recovery still counts bodies."""
    conn.execute(
        t.calls.update()
        .where(t.calls.c.dispatch_id == call["dispatch_id"])
        .values(
            status="running" if call["attempts"] else ("pending" if call["requires_approval"] else "saved"),
            outcome_note=None,
            paired_by=None,
            settled_run_id=None,
            ended_at=None,
        )
    )


def unresolved_calls_of_run(conn: sa.Connection, run_id: str) -> list[CallRow]:
    return cast("list[CallRow]", fetch_all(
        conn,
        sa.select(t.calls)
        .where(t.calls.c.run_id == run_id, t.calls.c.status.in_(CALL_UNRESOLVED | {"pending"}))
        .order_by(t.calls.c.step, t.calls.c.position),
    ))




# --- usage, stops, events ------------------------------------------------------------------------


_INSERT_USAGE = t.usage.insert()


def record_usage(conn: sa.Connection, session_id: str, run_id: str, step: int, model_name: str | None, u: Mapping[str, Any]) -> None:
    conn.execute(_INSERT_USAGE, {"session_id": session_id, "run_id": run_id, "step": step, "created_at": now(), **usage_values(model_name, u)})


def usage_values(model_name: str | None, u: Mapping[str, Any]) -> dict[str, Any]:
    """A usage row's own columns: the tokens as counted, the provider's whole record in ``details``."""
    inp, out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    return {"model_name": model_name, "input_tokens": inp, "output_tokens": out, "total_tokens": inp + out, "details": dict(u)}


def request_stop(conn: sa.Connection, session_id: str, run_id: str, kind: str, requested_by: str | None) -> bool:
    """One durable stop record per run; a second stop of the same run changes nothing."""
    if fetch_one(conn, sa.select(t.stops).where(t.stops.c.run_id == run_id)) is not None:
        return False
    conn.execute(
        t.stops.insert().values(
            run_id=run_id, session_id=session_id, kind=kind, requested_by=requested_by, requested_at=now()
        )
    )
    emit(conn, session_id, run_id, "stop_requested", {"kind": kind, "requested_by": requested_by})
    return True


def stop_of(conn: sa.Connection, run_id: str) -> str | None:
    return conn.execute(sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id)).scalar()


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
