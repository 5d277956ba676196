"""The fence every ledger transaction of a run passes: only the run's own, live workflow writes.

DBOS lets an operator act on a workflow from outside (``dbos workflow fork``, ``resume``,
``cancel``), and a process cut off from its store may wake long after a newer entry took its
session over. DBOS replays what it recorded and re-executes the rest, which for a helix run would
ask the model again, save a new step and start bodies a second time. So each transaction checks,
inside the transaction and under the session row's lock (an entry's claim of the session waits for
it, and it waits for the claim), that:

- it runs in the workflow whose id is the run id (a fork gets a new id: it is never the run), and
- the run is ``running`` and still its session's current run (a resumed superseded or ended run
  is not).

A refused workflow raises ``RunFencedError`` and writes nothing but one ``run_refused`` event
(``refuse``), so the operator reads why in ``dbos workflow get`` and in the session's events.
Replays of recorded transactions never reach the fence: ``durable.tx`` returns their recorded output.

The fence's one statement also reads what nearly every run transaction needs next: the run's stop
record (``stop_kind``) and DBOS's status of its workflow (``dbos_status``, for a cancel).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final, cast

import sqlalchemy as sa
from dbos import DBOS

from ...errors import RunFencedError
from ...ledger import store
from ...ledger import tables as t
from ...ledger.records import FenceRow, RunRow
from ..process import dbos_private


def current_workflow_id() -> str | None:
    """The DBOS workflow this code runs in (None outside any: an API-side transaction)."""
    return DBOS.workflow_id


def why_refused(conn: sa.Connection, run_id: str, workflow_id: str | None, *, admit_queued: bool = False) -> tuple[str | None, FenceRow | RunRow | None]:
    """Why a workflow may not write for ``run_id`` now (None: it may), and the run's row: the
    fence's (a ``FenceRow``) unless a fork was refused before the fence read (a plain ``RunRow``).

    ``admit_queued``: a ``queued`` run passes too (its first transaction, which turns it running)."""
    if workflow_id is not None and workflow_id != run_id:
        return why_refused_fork(run_id, workflow_id), store.get_run(conn, run_id)
    row = store.fetch_one(conn, _fence_statement(conn.dialect.name), {"w_run_id": run_id})
    if row is None:
        return f"run {run_id!r} has no ledger row", None
    current = row.pop("session_current_run_id")
    dbos_status = row.pop("dbos_status")
    if workflow_id is not None:
        row["dbos_status"] = dbos_status
    if current != run_id:
        return f"run {run_id!r} was superseded by run {current!r} of session {row['session_id']!r}", cast(FenceRow, row)
    if row["status"] != "running" and not (admit_queued and row["status"] == "queued"):
        return f"run {run_id!r} is no longer running (status {row['status']})", cast(FenceRow, row)
    return None, cast(FenceRow, row)


@functools.cache
def _fence_statement(dialect: str) -> sa.Select[Any]:
    """Built once per dialect (``store``'s rule for the write path: this runs in nearly every run
    transaction)."""
    stmt = (
        sa.select(t.runs, t.sessions.c.current_run_id.label("session_current_run_id"), t.stops.c.kind.label("stop_kind"),
                  dbos_private.workflow_status_of(t.runs.c.run_id, sqlite=dialect == "sqlite").label("dbos_status"))
        .join(t.sessions, t.sessions.c.session_id == t.runs.c.session_id)
        .outerjoin(t.stops, t.stops.c.run_id == t.runs.c.run_id)
        .where(t.runs.c.run_id == sa.bindparam("w_run_id"))
    )
    if dialect == "postgresql":
        # Exclusive, not shared: nearly every transaction of a run then bumps the session's event
        # sequence, and two share-holders upgrading to that update would deadlock each other.
        stmt = stmt.with_for_update(of=t.sessions)
    return stmt


def head_columns(run_id: Any, session_id: Any, *, sqlite: bool) -> list[Any]:
    """The fence's conditions as labelled scalar subqueries (``fence_status``, ``fence_current``,
    ``fence_stop``, ``fence_dbos``), for a statement that reads them unlocked beside what it reads
    anyway (the model step's messages, SQLite's gate beside the step's calls). ``head_passes``
    judges them; anything it does not pass takes ``check``, which says why and raises."""
    of_run = t.runs.c.run_id == run_id
    return [
        sa.select(t.runs.c.status).where(of_run).scalar_subquery().label("fence_status"),
        sa.select(t.sessions.c.current_run_id).where(t.sessions.c.session_id == session_id).scalar_subquery().label("fence_current"),
        sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id).scalar_subquery().label("fence_stop"),
        dbos_private.workflow_status_of(run_id, sqlite=sqlite).label("fence_dbos"),
    ]


def locked_head(run_id: Any) -> Any:
    """The fence's conditions as a CTE that takes the session row's lock, for a statement that
    locks rows of its own after it (Postgres: the attempt gate's read of the step's calls). Its
    columns are ``head_columns``' and the run's ``fence_agent``.

    The session row is locked before any row of the outer statement: the outer rows are locked at
    the top of its plan, after the join that first scans this CTE. That is the fence's order (the
    session first), which the result write keeps too, so two transactions of one session never
    hold each other's rows."""
    return (
        sa.select(
            t.runs.c.status.label("fence_status"),
            t.sessions.c.current_run_id.label("fence_current"),
            sa.select(t.stops.c.kind).where(t.stops.c.run_id == run_id).scalar_subquery().label("fence_stop"),
            dbos_private.workflow_status_of(run_id, sqlite=False).label("fence_dbos"),
            t.runs.c.agent_name.label("fence_agent"),
        )
        .select_from(t.runs.join(t.sessions, t.sessions.c.session_id == t.runs.c.session_id))
        .where(t.runs.c.run_id == run_id)
        .with_for_update(of=t.sessions)
        .cte("fenced")
    )


FENCE_HEAD_KEYS: Final = ("fence_status", "fence_current", "fence_stop", "fence_dbos")


def head_passes(head: Any, run_id: str) -> bool:
    """Whether ``head_columns`` as read (a row or a mapping) let this workflow through: it is the
    run's own, the run is running and its session's current run, and DBOS has not cancelled it."""
    get = head.__getitem__ if isinstance(head, Mapping) else functools.partial(getattr, head)
    workflow_id = current_workflow_id()
    return (
        workflow_id in (None, run_id)
        and get("fence_status") == "running"
        and get("fence_current") == run_id
        and get("fence_dbos") != "CANCELLED"
    )


def why_refused_fork(run_id: str, workflow_id: str | None) -> str:
    return (
        f"workflow {workflow_id!r} is not run {run_id!r}'s own workflow (a DBOS fork?); "
        "a helix session is re-entered with resume or retry, never by forking its workflow"
    )


def check(conn: sa.Connection, run_id: str, operation: str, *, admit_queued: bool = False) -> FenceRow:
    """Pass the fence or raise ``RunFencedError``; returns the run's row (read under the fence).

    A run DBOS cancelled (``dbos workflow cancel``) raises DBOS's own cancellation here, as a DBOS
    step would at its start: the run's ledger transactions and bodies are not DBOS steps, and the
    workflow settles the cancel like an abort (``workflow._settle_cancel``).
    """
    workflow_id = current_workflow_id()
    reason, run = why_refused(conn, run_id, workflow_id, admit_queued=admit_queued)
    if reason is None and workflow_id is not None and run is not None and run.get("dbos_status") == "CANCELLED":
        raise dbos_private.DBOSWorkflowCancelledError(f"workflow {workflow_id} was cancelled ({operation})")
    if reason is not None:
        raise RunFencedError(f"{operation} refused: {reason}", detail={"run_id": run_id, "operation": operation})
    assert run is not None
    return cast(FenceRow, run)  # no refusal: the fence read it (only a refused fork reads a plain run row)


def raise_if_refused(out: Any) -> None:
    """A result write that the fence refused (it closed its attempt and returned): stop the workflow."""
    if isinstance(out, dict) and out.get("refused"):
        raise RunFencedError(str(out["refused"]))


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a fence refusal, also when DBOS replays it from its
    recorded form, which keeps the message and code but not always the class."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, RunFencedError) or getattr(cur, "code", None) == RunFencedError.code:
            return True
        if "RunFencedError" in type(cur).__name__ or str(cur).startswith("RunFencedError"):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def refuse(engine: sa.Engine, run_id: str, workflow_id: str | None, message: str) -> None:
    """Record one ``run_refused`` event in the run's session (when the run exists): the only write
    a refused workflow makes. Outside DBOS's bookkeeping on purpose: a refused workflow adds no
    recorded operation that a later replay would have to match."""
    with engine.begin() as conn:
        run = store.get_run(conn, run_id)
        if run is None:
            return
        store.emit(conn, run["session_id"], run_id, "run_refused", {"run_id": run_id, "workflow_id": workflow_id, "reason": message})
