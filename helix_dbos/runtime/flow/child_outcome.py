"""How a parent learns a child's outcome: from the ledger, with DBOS's status only to tell a lost child.

A remote child's run and a companion's turn are both ledger runs whose run id is the parent call's
dispatch id, so the parent waits on one thing, the child run's row reaching rest, and reads the
answer from it (structured output, text or failure), never from a DBOS memo that retention may have
deleted. DBOS's workflow status answers one question only: can this child still finish? A child
whose workflow is gone, cancelled, dead-lettered or ended without a ledger outcome is *lost*, and the
call is answered with a typed ``subagent_lost`` error instead of a wait that never ends.

The wait is workflow code over recorded steps, each polling for at most ``WAIT_SLICE`` seconds, so a
replay sees the same sequence of "still waiting" answers and a live wait costs one step per slice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa

from ...ledger.names import CHILD_WAIT_STEP
from ...ledger.records import RunRow
from ...ledger.runs import end_run, get_run
from ...ledger.statuses import RUN_AT_REST, RUN_LIVE
from ...ledger.stops import request_stop, stop_of
from ...ledger.user_json import JsonObject
from ..floor import commits, fence, gate
from ..floor.durable import DBOS_TERMINAL, plain_tx, poll_interval, step
from ..floor.records import (
    ChildDone,
    ChildGate,
    ChildLost,
    ChildOutcome,
    ChildWaiting,
    DoneGate,
    RecordOutcome,
)
from ..process.dbos_private import workflow_status as dbos_status

if TYPE_CHECKING:
    from ..floor.registry import Env, Registry

#: Seconds one recorded wait step polls before it records "still waiting" and the next one starts.
WAIT_SLICE: Final = 30.0

UNSUPPORTED_SUSPENSION = (
    "the sub-agent suspended on a client tool or an approval; sub-agents run unattended, so their "
    "client tools and approval-gated tools are not supported (its run was aborted)"
)


def _done(run: RunRow) -> ChildDone:
    return ChildDone(run["status"], run["output"], run["error_code"], run["error"], run["session_id"])


def _propagate_stop(conn: sa.Connection, parent_run_id: str, child: RunRow | None) -> None:
    """A stop of the parent reaches the child it waits on: same kind, one durable record on the child run."""
    if child is None or child["status"] not in RUN_LIVE:  # a child queued on its agent's limit too
        return
    kind = stop_of(conn, parent_run_id)
    if kind is not None and stop_of(conn, child["run_id"]) is None:
        request_stop(conn, child["session_id"], child["run_id"], kind, f"parent run {parent_run_id}")


def child_state(conn: sa.Connection, parent_run_id: str, dispatch_id: str, host_workflow_id: str | None) -> ChildOutcome:
    """Where the child run ``dispatch_id`` stands: done (its ledger row at rest), lost, or waiting.

    ``host_workflow_id`` is the companion workflow that will start the turn (None for a remote child,
    whose own workflow exists from its dispatch on). DBOS statuses are read before the ledger row: a
    child writes its outcome before its workflow ends, so "terminal in DBOS, not at rest in the
    ledger" really means no outcome will ever come.
    """
    fence.check(conn, parent_run_id, "wait for sub-agent")
    own = dbos_status(conn, dispatch_id)
    host = dbos_status(conn, host_workflow_id) if host_workflow_id else None
    child = get_run(conn, dispatch_id)
    if child is not None and child["status"] in RUN_AT_REST:
        return _done(child)
    if own is not None:
        if own in DBOS_TERMINAL:
            return ChildLost(f"workflow_{own.lower()}", f"the sub-agent's workflow ended {own} without an outcome")
    elif host_workflow_id is None:
        return ChildLost("not_found", "the sub-agent's workflow cannot be found")
    elif host is None or host in DBOS_TERMINAL:
        return ChildLost("companion_gone", f"the companion's workflow ended ({host or 'not found'}) before it took this turn")
    _propagate_stop(conn, parent_run_id, child)
    return ChildWaiting()


async def _wait_slice(registry: Registry, parent_run_id: str, dispatch_id: str, host_workflow_id: str | None) -> ChildOutcome:
    deadline = time.monotonic() + WAIT_SLICE
    delay = 0.01
    while True:
        state = await plain_tx(child_state, parent_run_id, dispatch_id, host_workflow_id)
        if not isinstance(state, ChildWaiting) or time.monotonic() >= deadline:
            return state
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, poll_interval(registry))


async def wait_for_child(registry: Registry, parent_run_id: str, dispatch_id: str, host_workflow_id: str | None = None) -> ChildDone | ChildLost:
    """Workflow code: recorded wait steps until the child is done or lost (never an endless single wait)."""
    wait_slice = functools.partial(_wait_slice, registry)
    while True:
        state = await step({"name": CHILD_WAIT_STEP}, wait_slice, parent_run_id, dispatch_id, host_workflow_id, read_as=ChildOutcome)
        if isinstance(state, ChildDone | ChildLost):
            return state


def unavailable(conn: sa.Connection, run_id: str, answer: ChildGate, tool_name: str) -> ChildGate:
    """A sub-agent removed by a deploy before its child ever started: answer the call, start nothing."""
    gate.record(
        conn, run_id, answer.dispatch_id, answer.attempt, "error", None,
        {"type": "subagent_unavailable", "message": f"sub-agent tool {tool_name!r} is no longer defined"},
    )
    return replace(answer, answer=DoneGate("error"))


def _error(kind: str, message: str, **extra: str | None) -> JsonObject:
    """The parent call's error as its model reads it (``type`` and ``message``, as a tool's own)."""
    return {"type": kind, "message": message, **{k: v for k, v in extra.items() if v is not None}}


def record_outcome(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, attempt: int, state: ChildDone | ChildLost) -> RecordOutcome:
    """Answer the parent call from the child's outcome, fenced by the call's attempt.

    completed → the child's output is the tool result (structured when it has an ``output_type``);
    failed / interrupted → a typed error result; suspended → the child is aborted and the call gets
    ``subagent_unsupported``; lost → ``subagent_lost``, and a child run still marked running is ended
    ``failed`` so its session does not stay "running" forever.
    """
    child = get_run(conn, dispatch_id)
    if isinstance(state, ChildDone):
        sid = state.child_session_id
        status = state.status
        if status == "completed":
            return gate.record(conn, run_id, dispatch_id, attempt, "ok", state.output, None)
        if status == "suspended_client_tool":
            error = _error("subagent_unsupported", UNSUPPORTED_SUSPENSION, child_session_id=sid)
        elif status == "interrupted":
            error = _error("subagent_interrupted", "the sub-agent's run was interrupted before it finished", child_session_id=sid)
        else:
            error = _error(
                "subagent_failed",
                state.error or "the sub-agent's run failed",
                code=state.error_code,
                child_session_id=sid,
            )
    else:
        error = _error(
            "subagent_lost",
            state.message,
            code="subagent_lost",
            cause=state.cause,
            child_session_id=child["session_id"] if child is not None else None,
        )
    out = gate.record(conn, run_id, dispatch_id, attempt, "error", None, error)
    if out.written and child is not None:
        # Only the parent attempt that answered the call closes the child: a fenced-off late one must not.
        if child["status"] == "suspended_client_tool":
            request_stop(conn, child["session_id"], dispatch_id, "abort", f"parent run {run_id}")
            commits.settle_stop(conn, child, "abort", env.agent(child["agent_name"]), env.profile)
        elif child["status"] in RUN_LIVE and isinstance(state, ChildLost):
            end_run(conn, dispatch_id, "failed", error_code="subagent_lost", error=state.message)
    return out
