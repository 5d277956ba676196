"""The ledger reads that become a user's views (``helix_dbos/views.py``), on a caller's connection.

Shared by the face's ``Reader`` (every read a caller makes) and the run's own last transaction,
which reads its result for the waiting caller (``handoff.py``): one definition of what a run's
result, its pending calls and "at rest" are, below the run's flow so the workflow need not
import the face.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ...errors import RunNotFoundError, SessionNotFoundError
from ...ledger import attempts as attempt_rows
from ...ledger import calls as call_rows
from ...ledger import checkpoints as checkpoint_rows
from ...ledger import messages as message_rows
from ...ledger import runs as run_rows
from ...ledger import sessions as session_rows
from ...ledger import usage as usage_rows
from ...ledger.statuses import RUN_AT_REST, awaits_answer
from ...views import (
    AttemptRecord,
    CallView,
    CheckpointRecord,
    PendingCall,
    RunRecord,
    RunResult,
    SessionSummary,
    SessionView,
    Usage,
    pick,
)


def session_summary(conn: sa.Connection, session_id: str) -> SessionSummary:
    session = session_rows.get_session(conn, session_id)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return pick(SessionSummary, session)  # type: ignore[no-any-return]


def pending_calls(conn: sa.Connection, run: Mapping[str, Any]) -> list[PendingCall]:
    """What a suspended run waits for; nothing once a later run took its session over (a rewind,
    a new turn, the continuation after the answers): that run's waits are its own."""
    if run["status"] != "suspended_client_tool":
        return []
    session = session_rows.get_session(conn, run["session_id"])
    if session is None or session["current_run_id"] != run["run_id"]:
        return []
    rows = call_rows.pending_of_session(conn, run["session_id"])
    return [
        PendingCall(r["dispatch_id"], r["tool_name"], "client" if r["kind"] == "client" else "approval", r["args"], r["tool_call_id"])
        for r in rows
        if awaits_answer(r["kind"], r["requires_approval"], r["approved"])
    ]


def run_usage(conn: sa.Connection, run_id: str) -> Usage:
    return Usage(*usage_rows.totals_of_run(conn, run_id))


def read_result(conn: sa.Connection, run_id: str, run: Mapping[str, Any] | None = None) -> RunResult:
    """The run's result; ``run``: its row when the caller has just read it (one read, not two),
    with its usage when read by ``ledger.usage.run_with_usage``."""
    row: Mapping[str, Any] | None = run if run is not None else run_rows.get_run(conn, run_id)
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    run = row
    usage = Usage(int(run["usage_requests"]), int(run["usage_input"]), int(run["usage_output"])) if "usage_requests" in run else run_usage(conn, run_id)
    return RunResult(
        status=run["status"],
        output=run["output"],
        session_id=run["session_id"],
        run_id=run_id,
        pending=pending_calls(conn, run),
        error=run["error"],
        error_code=run["error_code"],
        usage=usage,
    )


def _call_view(c: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> CallView:
    return CallView(
        dispatch_id=c["dispatch_id"],
        tool_name=c["tool_name"],
        kind=c["kind"],
        args=c["args"],
        status=c["status"],
        attempts=[pick(AttemptRecord, a) for a in attempts],
        result=c["result"],
        error=c["error"],
        replay=c["replay"],
        step=c["step"],
        position=c["position"],
        run_id=c["run_id"],
        note=c["outcome_note"],
        tool_call_id=c["tool_call_id"],
        approved=c["approved"],
        approval_actor=c["approval_actor"],
        child_session_id=c["child_session_id"],
        decided_by=c["decided_by"],
        check_outcome=c["check_outcome"],
    )


def read_session(conn: sa.Connection, session_id: str) -> SessionView:
    session = session_rows.get_session(conn, session_id)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    calls = call_rows.list_calls(conn, session_id=session_id, limit=100_000)
    from ..floor import transcript  # pydantic-ai's message types: loaded by the reads that return messages

    attempts = attempt_rows.attempts_of(conn, [c["dispatch_id"] for c in calls])
    return SessionView(
        session_id=session_id,
        agent_name=session["agent_name"],
        status=session["status"],
        current_run_id=session["current_run_id"],
        messages=transcript.load([m["body"] for m in message_rows.active_messages(conn, session_id)]),
        runs=[pick(RunRecord, r) for r in run_rows.list_runs(conn, session_id)],
        checkpoints=[pick(CheckpointRecord, c) for c in checkpoint_rows.list_checkpoints(conn, session_id)],
        calls=[_call_view(c, attempts[c["dispatch_id"]]) for c in calls],
        owner=session["owner"],
        queue_position=_queue_position(conn, session["current_run_id"]) if session["status"] == "queued" else None,
    )


def _queue_position(conn: sa.Connection, run_id: str | None) -> int | None:
    from ..process.dbos_private import queue_position  # DBOS's tables: imported by the read that needs them

    return queue_position(conn, run_id) if run_id else None


def at_rest(conn: sa.Connection, run_id: str) -> RunResult | None:
    run = usage_rows.run_with_usage(conn, run_id)
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    return read_result(conn, run_id, run) if run["status"] in RUN_AT_REST else None
