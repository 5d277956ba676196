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
from dbos import DBOS, PortableWorkflowError

from ...errors import RunFencedError
from ...ledger import events, fence_reads
from ...ledger import runs as run_rows
from ...ledger.records import FenceRow, RunRow
from ..process import dbos_private
from .records import DoneOutcome, RecordOutcome

#: DBOS's status of a workflow as a scalar subquery: what the ledger's fence reads take for it (the
#: ledger does not describe DBOS's tables; ``dbos_private`` is their one door).
STATUS_OF: Final = dbos_private.workflow_status_of


def current_workflow_id() -> str | None:
    """The DBOS workflow this code runs in (None outside any: an API-side transaction)."""
    return DBOS.workflow_id


def why_refused(conn: sa.Connection, run_id: str, workflow_id: str | None, *, admit_queued: bool = False) -> tuple[str | None, FenceRow | RunRow | None]:
    """Why a workflow may not write for ``run_id`` now (None: it may), and the run's row: the
    fence's (a ``FenceRow``) unless a fork was refused before the fence read (a plain ``RunRow``).

    ``admit_queued``: a ``queued`` run passes too (its first transaction, which turns it running)."""
    if workflow_id is not None and workflow_id != run_id:
        return why_refused_fork(run_id, workflow_id), run_rows.get_run(conn, run_id)
    row = fence_reads.fence_row(conn, run_id, STATUS_OF)
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


def head_passes(head: Any, run_id: str) -> bool:
    """Whether the fence's conditions as read beside other rows (``ledger.fence_reads.HEAD_KEYS``,
    a row or a mapping) let this workflow through: it is the
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


def raise_if_refused(out: RecordOutcome | DoneOutcome) -> None:
    """A result write that the fence refused (it closed its attempt and returned): stop the workflow."""
    if isinstance(out, RecordOutcome) and out.refused:
        raise RunFencedError(out.refused)


def refusal(exc: BaseException) -> RunFencedError | None:
    """The fence refusal ``exc`` is or was caused by, as a ``RunFencedError``; None if it is none.

    Also when DBOS replays it from its record of a step or a workflow: helix's serializer is DBOS's
    portable JSON, which gives a recorded error back as a ``PortableWorkflowError`` (name, message,
    code, ``data``), and the refusal is rebuilt from the typed record it left in ``data``
    (``RunFencedError.from_record``). Nothing is judged by a class name or a message's words: an
    unrelated error that merely reads like a refusal is not one."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, RunFencedError):
            return cur
        if isinstance(cur, PortableWorkflowError) and (revived := RunFencedError.from_record(cur.data)) is not None:
            return revived
        cur = cur.__cause__ or cur.__context__
    return None


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a fence refusal, fresh or replayed by DBOS (``refusal``)."""
    return refusal(exc) is not None


def refuse(engine: sa.Engine, run_id: str, workflow_id: str | None, message: str) -> None:
    """Record one ``run_refused`` event in the run's session (when the run exists): the only write
    a refused workflow makes. Outside DBOS's bookkeeping on purpose: a refused workflow adds no
    recorded operation that a later replay would have to match."""
    with engine.begin() as conn:
        run = run_rows.get_run(conn, run_id)
        if run is None:
            return
        events.emit(conn, run["session_id"], run_id, "run_refused", {"run_id": run_id, "workflow_id": workflow_id, "reason": message})
