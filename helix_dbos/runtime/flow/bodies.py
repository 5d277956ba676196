"""Call bodies: each opens with the attempt gate, a committed attempt record, and ends with its result.

A body is not a DBOS step: the gate and the result write are the ledger's two facts about the call
(each one short transaction), and the body runs between them in the run workflow's code. A replay of
the workflow re-enters the gate, which answers from the ledger what already happened: a body with
an attempt and no result runs again only if recovery says so (safe on both sides, under 3 bodies;
transactional; or a check said not applied), otherwise the gate answers the call without a body.

Both ledger writes here ride out store outages (``plain_tx`` retries transient errors), and a retry
after a commit whose acknowledgement was lost must not see its own write as someone else's: the gate
stamps its attempt with a token minted per gate execution, the result write recognises its own answer.

Where the gate would answer a started call ``outcome_unknown`` and its tool has a reconcile check,
it answers "reconcile": the check is asked (outside any transaction), its verdict committed to the
call's row as a ledger fact of its own (``reconcile.ask_and_record``), and the gate runs again. A
transactional tool's body runs in ``transactional.run``: its writes and its result in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ...definitions import Agent, ToolContext
from ...ledger import calls as call_rows
from ...ledger.statuses import CallStatus
from ...threads import in_daemon_thread
from ..floor import fence, gate, group_commit, transcript
from ..floor.durable import Tries, plain_tx
from ..floor.records import (
    BodyOutcome,
    DoneGate,
    DoneOutcome,
    GateOutcome,
    ReconcileGate,
    RecordOutcome,
    RunGate,
)
from ..floor.registry import Env, Registry
from ..process import trace_export, tracing
from ..process.faults import crash_point, fail_point
from . import reconcile, scopes, tool_errors, transactional
from .local_child import run_local_child

log = logging.getLogger("helix_dbos")


async def _hold_executor_lock(registry: Registry) -> None:
    """Wait while the watchdog re-acquires a lost executor lock (it exits the process if it cannot)."""
    if not registry.lock_held():
        await asyncio.to_thread(registry.wait_lock_held)


@dataclass(frozen=True, slots=True)
class _Gated:
    """The gate's answer, and what the body's span names beside it: the call's tool and saved policy."""

    answer: GateOutcome
    tool: str | None
    policy: str | None


def _gate(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, token: str, tries: Tries, where: tuple[str, int] | None) -> _Gated:
    """The attempt gate, plus the call's tool and saved policy (for the span)."""
    out = gate.gate(conn, env, run_id, dispatch_id, token, retried=tries.begin(), where=where)
    if isinstance(out, RunGate):  # the body goes ahead: its answer names both
        return _Gated(out, out.tool_name, out.replay)
    if isinstance(out, DoneGate) and out.settled_before:  # a replay reaching it: no span
        return _Gated(out, None, None)
    call = call_rows.get_call(conn, dispatch_id)  # answered now without a body: the span still names the call's tool and policy
    return _Gated(out, call["tool_name"] if call else None, call["replay"] if call else None)


async def run_body(registry: Registry, run_id: str, dispatch_id: str, where: tuple[str, int] | None = None) -> BodyOutcome:
    """One call's body: the attempt gate, the body (or the answer recovery gives instead), the result.

    Not a DBOS step: the gate and the result write are the ledger's two facts about the call, and a
    replay of the workflow re-enters the gate, which answers from the ledger what already happened.

    Its span is opened once the gate has answered (from when the gate was asked): a call settled
    before this execution reached it (a replay) did nothing now and gets none. It is not made the
    body's current span: a span the tool opens ends before this one, and when a kill loses this one
    the tool's, flushed by another call's commit, would have no parent; it names the run's root.
    """
    started = time.time_ns()
    await _hold_executor_lock(registry)  # no attempt is recorded by a process that lost its executor id
    gated = await group_commit.write(registry, run_id, fence.current_workflow_id(), _gate, registry.env, run_id, dispatch_id, uuid.uuid4().hex, Tries(), where)
    answer = gated.answer
    while isinstance(answer, ReconcileGate):  # once: the verdict is on the row when the gate runs again
        await reconcile.ask_and_record(registry, run_id, dispatch_id, answer.check_request())
        gated = await plain_tx(_gate, registry.env, run_id, dispatch_id, uuid.uuid4().hex, Tries(), where)
        answer = gated.answer
    if isinstance(answer, DoneGate) and answer.settled_before:
        return DoneOutcome(answer.status)
    with tracing.span_since(tracing.BODY_ATTEMPT_SPAN, run_id, started, dispatch_id=dispatch_id, tool=gated.tool,
                            policy=gated.policy, decision=answer.action, attempt=answer.attempt if isinstance(answer, RunGate) else None) as s:
        out = await _body(registry, run_id, dispatch_id, answer)
        tracing.annotate(s, status=out.status)
    await trace_export.flushed()  # the call's result is committed: its spans leave before a kill can lose them
    return out


async def _body(registry: Registry, run_id: str, dispatch_id: str, answer: DoneGate | RunGate) -> BodyOutcome:
    """The body under its gate's answer, past the gate's reconcile loop (``run_body``): a body that goes ahead, or an answer."""
    e = registry.env
    if isinstance(answer, DoneGate):
        return DoneOutcome(answer.status)
    gate = answer
    agent: Agent = e.agent(gate.agent_name)
    name = gate.tool_name
    ctx = ToolContext(
        session_id=gate.session_id,
        run_id=run_id,
        dispatch_id=None if e.profile == "dbos_compat" else dispatch_id,
        tool_call_id=gate.tool_call_id,
        attempt=gate.attempt,
        agent_name=agent.name,
        tool_name=name,
        approved=gate.approved,
    )
    if agent.uses_scope():  # a fresh process lists the pydantic-ai agent's toolsets before its body
        await agent.refresh(await scopes.scope_of(agent, run_id, gate.session_id))
    crash_point("before_body", name)
    fail_point("before_body", name)
    await _hold_executor_lock(registry)  # nor does it start the body
    tool = agent.tool(name)
    if gate.transactional and tool is not None and tool.transactional:
        # a daemon thread, as for any sync body: a transactional body stuck for ever never holds the exit
        out = await in_daemon_thread(transactional.run, registry, run_id, dispatch_id, gate.attempt, tool, gate.args, ctx, name=f"helix-body-{name}")
        fence.raise_if_refused(out)
        crash_point("after_result", name)
        return out
    try:
        sub = agent.sub_agent(name)
        if sub is not None:
            value = await run_local_child(sub.agent, gate.args["message"], ctx)
        else:
            tool = agent.tool(name)
            if tool is None:
                raise LookupError(f"tool {name!r} is no longer defined")
            value = await tool.invoke(tool.validate(gate.args), ctx)
        status: CallStatus
        ok, value = transcript.jsonable(value)
        if ok:
            status, result, error = "ok", value, None
        else:
            status, result, error = "error", None, {"type": "result_not_serializable", "message": value}
    except Exception as exc:  # noqa: BLE001 - whatever the body raised is the call's answer (logged in tool_errors)
        tool_errors.tool_raised(run_id, name, dispatch_id, exc)
        status, result, error = "error", None, {"type": type(exc).__name__, "message": str(exc)}
    crash_point("after_body", name)
    written: BodyOutcome = await group_commit.write(
        registry, run_id, fence.current_workflow_id(), _record, run_id, dispatch_id, gate.attempt, status, result, error, Tries(), gate.tool_name
    )
    fence.raise_if_refused(written)
    crash_point("after_result", name)
    return written


def _record(
    conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, status: CallStatus, result: Any, error: Any, tries: Tries, tool_name: str | None = None
) -> RecordOutcome:
    return gate.record_once(conn, run_id, dispatch_id, attempt, status, result, error, retried=tries.begin(), tool_name=tool_name)
