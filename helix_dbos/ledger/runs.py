"""The ``runs`` table: a run's row opened, started, counted and ended (its end releases its session
in the same statement on Postgres), and the runs of an executor (its wake, its operator view).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from . import tables as t
from .events import emit
from .records import EndedRun, RunRow
from .rows import by_key, fetch_all, fetch_one, now
from .sessions import insert_session_row
from .statuses import EntryKind


@dataclass(frozen=True, kw_only=True)  # by name only: four of its fields are strings a position could swap
class RunOpening:
    """What the opener of a run says of it (an entry, a remote child's first dispatch, a companion's
    turn: ``runtime/floor/runs.py``); every other column is derived from its session.

    ``executor_id`` is the process that admits the run (not necessarily the one that will run it).
    ``queued``: the run waits on a queue for a worker (``queued``, not ``running``, until one takes it).
    """

    run_id: str
    entry: EntryKind
    message: str | None
    max_steps: int
    recovery: str
    executor_id: str | None
    checkpoint_id: str | None = None
    queued: bool = False

    @property
    def status(self) -> str:
        return "queued" if self.queued else "running"


def opened_run_values(opening: RunOpening, *, session_id: str, agent_name: str, seq: int, previous_run_id: str | None) -> dict[str, Any]:
    """The row of the run ``opening`` opens in that session: the one derivation every opener uses."""
    return run_values(
        run_id=opening.run_id, session_id=session_id, seq=seq, agent_name=agent_name, entry=opening.entry,
        entry_message=opening.message, checkpoint_id=opening.checkpoint_id, previous_run_id=previous_run_id,
        max_steps=opening.max_steps, recovery=opening.recovery, executor_id=opening.executor_id, status=opening.status,
    )


def running_of_executor(conn: sa.Connection, executor_id: str) -> list[str]:
    """Ids of the runs the ledger still says are running on ``executor_id``."""
    stmt = sa.select(t.runs.c.run_id).where(t.runs.c.status == "running", t.runs.c.executor_id == executor_id)
    return list(conn.execute(stmt).scalars().all())


def queued(conn: sa.Connection) -> list[str]:
    """Ids of the runs waiting on an entry queue (no executor has them yet)."""
    return list(conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.status == "queued")).scalars().all())


def count_of_executor(conn: sa.Connection, executor_id: str) -> int:
    """How many runs (any status) ``executor_id`` ever ran."""
    return int(conn.execute(sa.select(sa.func.count()).select_from(t.runs).where(t.runs.c.executor_id == executor_id)).scalar() or 0)


def run_values(**values: Any) -> dict[str, Any]:
    """A new run's row: ``values`` with the defaults of a run just opened."""
    values.setdefault("created_at", now())
    values.setdefault("status", "running")
    # started where it was admitted (a queued run: when a worker takes it)
    values.setdefault("started_at", values["created_at"] if values["status"] != "queued" else None)
    return values


def insert_run(conn: sa.Connection, **values: Any) -> None:
    conn.execute(_INSERT_RUN, run_values(**values))  # built once: an entry's Python time went mostly to building it


_INSERT_RUN = t.runs.insert()


def insert_first_run(conn: sa.Connection, session: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """A new session's row (``sessions.new_session_row``, already claimed by ``run``) and its first
    run's (``run_values``); False, writing neither, when the session id was taken.

    On Postgres one statement: a writable CTE inserts the session (``ON CONFLICT DO NOTHING``) and
    the run is selected from what it returned. SQLite has no writable CTEs: two statements there.
    """
    if conn.dialect.name != "postgresql":
        if insert_session_row(conn, dict(session)) is None:
            return False
        conn.execute(_INSERT_RUN, dict(run))
        return True
    params = {f"s_{k}": v for k, v in session.items()} | {f"r_{k}": run[k] for k in _FIRST_RUN_COLUMNS}
    return conn.execute(_insert_first_run_pg(), params).first() is not None


#: The run's columns ``_insert_first_run_pg`` binds (``r_*``); its ``session_id`` comes from the session's insert.
_FIRST_RUN_COLUMNS = ("run_id", "seq", "agent_name", "entry", "entry_message", "checkpoint_id", "previous_run_id", "status",
                      "max_steps", "recovery", "executor_id", "created_at", "started_at")


@functools.cache
def _insert_first_run_pg() -> Any:
    """``WITH created AS (INSERT INTO sessions ... ON CONFLICT DO NOTHING RETURNING session_id)
    INSERT INTO runs (...) SELECT created.session_id, ... FROM created RETURNING run_id``."""
    from sqlalchemy.dialects.postgresql import insert

    sessions, runs = t.sessions.c, t.runs.c
    created = (
        insert(t.sessions)
        .values({c.name: sa.bindparam(f"s_{c.name}", type_=c.type) for c in sessions})
        .on_conflict_do_nothing()
        .returning(sessions.session_id)
        .cte("created")
    )
    values = [sa.bindparam(f"r_{name}", type_=runs[name].type) for name in _FIRST_RUN_COLUMNS]
    return t.runs.insert().from_select(["session_id", *_FIRST_RUN_COLUMNS], sa.select(created.c.session_id, *values)).add_cte(created).returning(runs.run_id)


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
    return cast("RunRow | None", fetch_one(conn, by_key(t.runs, "run_id", False), {"w_key": run_id}))


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
