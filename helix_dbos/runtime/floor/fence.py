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

This module is the fence's one judge; its statements are the ledger's (``ledger/fence_reads.py``).
Callers take one entry point each, which reads, decides and refuses in one call:

- ``check``: pass or raise ``RunFencedError`` (nearly every transaction of a run);
- ``step_calls`` / ``new_messages``: the fence read beside what the transaction reads anyway (a
  step's calls, a session's new messages), falling back to ``check`` when it would not pass;
- ``refused``: the reason, not raised, for a result write that closes its attempt when refused;
- ``live_run``: the same judgement from outside the run's workflow (settling a DBOS cancel);
- ``refuse``: the one write a refused workflow makes (its ``run_refused`` event), and its typed error;
- ``refusal`` / ``is_fenced`` / ``raise_if_refused``: a refusal recognised wherever it surfaces.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final, TypedDict, cast

import sqlalchemy as sa
from dbos import DBOS, PortableWorkflowError

from ...errors import RunFencedError
from ...ledger import calls as call_rows
from ...ledger import events, fence_reads
from ...ledger import runs as run_rows
from ...ledger.records import CallRow, FenceRow, RunRow
from ..process import dbos_private
from .records import DoneOutcome, RecordOutcome

#: DBOS's status of a workflow as a scalar subquery: what the ledger's fence reads take for it (the
#: ledger does not describe DBOS's tables; ``dbos_private`` is their one door).
STATUS_OF: Final = dbos_private.workflow_status_of


class FenceHead(TypedDict):
    """What a step's transaction reads of the fence it passed: the run's agent and its stop record."""

    agent_name: str
    stop_kind: str | None


def current_workflow_id() -> str | None:
    """The DBOS workflow this code runs in (None outside any: an API-side transaction)."""
    return DBOS.workflow_id


def is_own_workflow(run_id: str) -> bool:
    """Whether this code may be ``run_id``'s own: it runs in the run's workflow, or in none (a fork
    never is, whatever the rows say). The first of the fence's conditions, the one no row holds."""
    return current_workflow_id() in (None, run_id)


# --- the entry points: read, decide, refuse ------------------------------------------------------


def check(conn: sa.Connection, run_id: str, operation: str, *, admit_queued: bool = False) -> FenceRow:
    """Pass the fence or raise ``RunFencedError``; returns the run's row (read under the fence).

    ``admit_queued``: a ``queued`` run passes too (its first transaction, which turns it running).
    A run DBOS cancelled (``dbos workflow cancel``) raises DBOS's own cancellation here, as a DBOS
    step would at its start: the run's ledger transactions and bodies are not DBOS steps, and the
    workflow settles the cancel like an abort (``workflow._settle_cancel``).
    """
    workflow_id = current_workflow_id()
    reason, run = _judge(conn, run_id, workflow_id, admit_queued=admit_queued)
    if reason is None and workflow_id is not None and run is not None and run.get("dbos_status") == "CANCELLED":
        raise dbos_private.DBOSWorkflowCancelledError(f"workflow {workflow_id} was cancelled ({operation})")
    if reason is not None:
        raise RunFencedError(f"{operation} refused: {reason}", detail={"run_id": run_id, "operation": operation})
    assert run is not None
    return cast(FenceRow, run)  # no refusal: the fence read it (only a refused fork reads a plain run row)


def refused(conn: sa.Connection, run_id: str) -> str | None:
    """Why this workflow may not write for ``run_id`` now, or None: ``check``'s judgement, said
    rather than raised, for a result write that must close its attempt before it stops the workflow."""
    reason, _ = _judge(conn, run_id, current_workflow_id())
    return reason


def live_run(conn: sa.Connection, run_id: str) -> FenceRow | None:
    """The run's row if it is still its session's current, running or queued run; else None.

    Judged as an API-side transaction is (no workflow, no DBOS status read): what settles a DBOS
    cancel, from the run's own workflow or from a front end that found it, where ``check`` would
    raise the cancellation it is settling."""
    reason, run = _judge(conn, run_id, None, admit_queued=True)
    return None if reason is not None or run is None else cast(FenceRow, run)


def step_calls(conn: sa.Connection, run_id: str, saver: str, step: int, operation: str, *, for_update: bool = False) -> tuple[FenceHead, list[CallRow]]:
    """Pass the fence for ``run_id`` and read the calls ``saver`` saved at ``step``.

    One statement when the fence passes (``fence_reads.calls_beside_fence``: on Postgres the session
    row locked first); otherwise, or for a step with no calls (nothing to read the fence beside),
    ``check`` (which says why, and raises a refusal for ``operation``) and then the calls."""
    if is_own_workflow(run_id):
        rows = fence_reads.calls_beside_fence(conn, run_id, saver, step, STATUS_OF, for_update=for_update)
        if rows and _head_passes(rows[0], run_id):
            head: FenceHead = {"agent_name": rows[0]["fence_agent"], "stop_kind": rows[0]["fence_stop"]}
            for r in rows:
                for k in fence_reads.CALLS_HEAD_KEYS:
                    del r[k]
            return head, cast("list[CallRow]", rows)
    row = check(conn, run_id, operation)
    return {"agent_name": row["agent_name"], "stop_kind": row["stop_kind"]}, call_rows.of_step(conn, saver, step, for_update=for_update)


def new_messages(conn: sa.Connection, run_id: str, session_id: str, after_seq: int, operation: str) -> tuple[str | None, list[sa.Row[Any]]]:
    """Pass the fence for ``run_id`` and read the session's messages after ``after_seq``
    (``fence_reads.messages_beside_fence``: its rows, with ``superseded``); the run's stop kind.

    The fence's conditions are read unlocked, beside the messages: a read has nothing to protect
    (the model is paid after this transaction ends, so no lock held here could cover it; the append
    that saves the reply is the fenced write). Anything the fence would refuse takes ``check``,
    which raises what it raises."""
    rows = fence_reads.messages_beside_fence(conn, run_id, session_id, after_seq, STATUS_OF)
    if _head_passes(rows[0], run_id):
        return rows[0].fence_stop, rows
    return check(conn, run_id, operation)["stop_kind"], rows  # a fork or a superseded run never asks the model


def refuse(engine: sa.Engine, run_id: str, workflow_id: str | None, exc: BaseException) -> RunFencedError:
    """Record a refused workflow's one write, a ``run_refused`` event in the run's session (when the
    run exists), and give the typed error DBOS will record for it.

    Outside DBOS's bookkeeping on purpose: a refused workflow adds no recorded operation that a
    later replay would have to match."""
    message = str(exc) or "refused by the run fence"
    with engine.begin() as conn:
        run = run_rows.get_run(conn, run_id)
        if run is not None:
            events.emit(conn, run["session_id"], run_id, "run_refused", {"run_id": run_id, "workflow_id": workflow_id, "reason": message})
    return exc if isinstance(exc, RunFencedError) else RunFencedError(message)


def fork_refusal(run_id: str, workflow_id: str | None) -> RunFencedError:
    """The refusal of a workflow that is not the run's own (a DBOS fork), before it reads anything."""
    return RunFencedError(f"workflow refused: {_why_fork(run_id, workflow_id)}")


# --- recognising a refusal -----------------------------------------------------------------------


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


# --- the judgement -------------------------------------------------------------------------------


def _judge(conn: sa.Connection, run_id: str, workflow_id: str | None, *, admit_queued: bool = False) -> tuple[str | None, FenceRow | RunRow | None]:
    """Why a workflow may not write for ``run_id`` now (None: it may), and the run's row: the
    fence's (a ``FenceRow``) unless a fork was refused before the fence read (a plain ``RunRow``)."""
    if workflow_id is not None and workflow_id != run_id:
        return _why_fork(run_id, workflow_id), run_rows.get_run(conn, run_id)
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


def _head_passes(head: Any, run_id: str) -> bool:
    """Whether the fence's conditions as read beside other rows (``ledger.fence_reads.HEAD_KEYS``,
    a row or a mapping) let this workflow through: it is the run's own, the run is running and its
    session's current run, and DBOS has not cancelled it."""
    get = head.__getitem__ if isinstance(head, Mapping) else functools.partial(getattr, head)
    return (
        is_own_workflow(run_id)
        and get("fence_status") == "running"
        and get("fence_current") == run_id
        and get("fence_dbos") != "CANCELLED"
    )


def _why_fork(run_id: str, workflow_id: str | None) -> str:
    return (
        f"workflow {workflow_id!r} is not run {run_id!r}'s own workflow (a DBOS fork?); "
        "a helix session is re-entered with resume or retry, never by forking its workflow"
    )
