"""The ``checkpoints`` table: a session's durable boundaries (append, step, suspension), each a
pointer into its messages, never a copy; and the rewind that supersedes what came after one.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .events import emit
from .messages import next_message_seq
from .records import CheckpointRow
from .rows import fetch_all, fetch_one, new_id, now


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
