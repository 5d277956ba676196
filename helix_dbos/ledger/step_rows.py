"""A step's own rows, in one statement on Postgres: its messages, the reply's usage and the run's
step count, and its checkpoint.

Every step commit writes some of these together, and sent one by one they were the larger part of
a step's statements. Postgres takes them as one statement of writable CTEs. A CTE's rows are not
visible to its siblings' subqueries, so each message is numbered from the one before it (the
first from the session's highest), and the checkpoint's boundary from the last of them, never by
reading the table again. The commit's events ride the same statement (``events.emit_many``'s
rules: one bump of the session's counter, numbered in the order given). SQLite has no writable
CTEs: the same rows go one statement each, then the events in one, in the caller's transaction
either way.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import tables as t
from .checkpoints import insert_checkpoint
from .events import append_held, emit_many, emit_many_params, emit_many_pg
from .messages import insert_message, next_message_seq
from .rows import now
from .runs import count_run_step
from .usage import record_usage, usage_values


@dataclass(frozen=True)
class StepRows:
    session_id: str
    run_id: str
    step: int
    #: ``(kind, body)`` in transcript order.
    messages: Sequence[tuple[str, Any]] = ()
    #: The reply's model name and usage: a usage row, and one more step on the run's count.
    usage: tuple[str | None, Mapping[str, Any]] | None = None
    #: ``(checkpoint_id, kind)``; its boundary is after ``messages``.
    checkpoint: tuple[str, str] | None = None


Events = Sequence[tuple[str, Mapping[str, Any]]]


def write(conn: sa.Connection, rows: StepRows, events: Events = ()) -> None:
    """``rows`` and then ``events`` (the session's and run's, in order)."""
    if conn.dialect.name != "postgresql":
        _write_each(conn, rows)
        emit_many(conn, rows.session_id, rows.run_id, events)
        return
    append_held(conn)  # its events are numbered after any a ``one_bump`` holds
    ts = now()
    params: dict[str, Any] = {"w_session_id": rows.session_id, "w_run_id": rows.run_id, "p_step": rows.step, "p_ts": ts}
    if events:
        params.update(emit_many_params(events))
    for i, (kind, body) in enumerate(rows.messages):
        params[f"p_kind{i}"], params[f"p_body{i}"] = kind, body
    if rows.usage is not None:
        params.update(_usage_params(*rows.usage))
    if rows.checkpoint is not None:
        params["p_checkpoint_id"], params["p_checkpoint_kind"] = rows.checkpoint
    conn.execute(_statement_pg(len(rows.messages), rows.usage is not None, rows.checkpoint is not None, bool(events)), params)


def _write_each(conn: sa.Connection, rows: StepRows) -> None:
    sid, run_id = rows.session_id, rows.run_id
    for kind, body in rows.messages:
        insert_message(conn, sid, run_id, rows.step, kind, body)
    if rows.usage is not None:
        record_usage(conn, sid, run_id, rows.step, *rows.usage)
        count_run_step(conn, run_id)
    if rows.checkpoint is not None:
        insert_checkpoint(conn, sid, run_id, rows.step, rows.checkpoint[1], rows.checkpoint[0], with_event=False)


def _usage_params(model_name: str | None, u: Mapping[str, Any]) -> dict[str, Any]:
    return {f"p_{k}": v for k, v in usage_values(model_name, u).items()}


@functools.cache
def _statement_pg(n_messages: int, usage: bool, checkpoint: bool, events: bool) -> sa.Executable:
    """Built once per shape. Binds are ``w_*``/``p_*``, never a column's name: a key named like a
    column of any table written here would become a value of that write too."""
    session_id = sa.bindparam("w_session_id", type_=t.messages.c.session_id.type)
    run_id = sa.bindparam("w_run_id", type_=t.messages.c.run_id.type)
    step = sa.bindparam("p_step", type_=sa.Integer)
    ts = sa.bindparam("p_ts", type_=t.messages.c.created_at.type)
    ctes: list[Any] = []
    last: Any = None
    for i in range(n_messages):
        seq = next_message_seq() if last is None else sa.select(last.c.seq + 1).scalar_subquery()
        last = (
            t.messages.insert()
            .values(session_id=session_id, seq=seq, run_id=run_id, step=step, kind=sa.bindparam(f"p_kind{i}", type_=t.messages.c.kind.type),
                    body=sa.bindparam(f"p_body{i}", type_=t.messages.c.body.type), created_at=ts)
            .returning(t.messages.c.seq)
            .cte(f"message{i}")
        )
        ctes.append(last)
    if usage:
        u = t.usage.c
        ctes.append(
            t.usage.insert()
            .values(session_id=session_id, run_id=run_id, step=step, model_name=sa.bindparam("p_model_name", type_=u.model_name.type),
                    input_tokens=sa.bindparam("p_input_tokens", type_=sa.Integer), output_tokens=sa.bindparam("p_output_tokens", type_=sa.Integer),
                    total_tokens=sa.bindparam("p_total_tokens", type_=sa.Integer), details=sa.bindparam("p_details", type_=u.details.type), created_at=ts)
            .cte("used")
        )
        ctes.append(t.runs.update().where(t.runs.c.run_id == run_id).values(steps=t.runs.c.steps + 1).cte("counted"))
    if checkpoint:
        boundary = next_message_seq() if last is None else last.c.seq + 1
        source = sa.select(
            sa.bindparam("p_checkpoint_id", type_=t.checkpoints.c.checkpoint_id.type), session_id, run_id, step,
            sa.bindparam("p_checkpoint_kind", type_=t.checkpoints.c.kind.type), boundary, ts,
        )
        if last is not None:
            source = source.select_from(last)
        ctes.append(
            t.checkpoints.insert()
            .from_select(["checkpoint_id", "session_id", "run_id", "step", "kind", "message_seq", "created_at"], source)
            .cte("checkpointed")
        )
    if events:
        top: sa.Insert | sa.Select[Any] = emit_many_pg(session_id, run_id, ts)
    elif last is not None:
        top = sa.select(last.c.seq)
    else:
        top = sa.select(sa.literal(1))
    for cte in ctes:
        top = top.add_cte(cte)
    return top
