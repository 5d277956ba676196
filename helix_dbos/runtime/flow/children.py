"""Remote sub-agents: a delegating call answered by a child run that any worker may execute.

A remote child's run is a ledger run *and* a DBOS workflow whose id is the parent call's dispatch id,
enqueued from the parent's workflow code on the runtime's queue (or, when the child's agent has
``max_running``, on that agent's entry queue, where the limit counts it), so any worker process
serving that queue can run it. The first dispatch mints the child's session (a fresh id, never derived from the
parent's) and binds it to the delegation (``sessions.parent_dispatch_id``, ``calls.child_session_id``)
in the same exactly-once transaction as the call's attempt record.

Recovery re-attaches by dispatch id: enqueueing an existing workflow id returns that workflow, so a
relaunch, a ``resume`` or a ``retry`` of the parent never starts a second child for one call. A
child whose outcome is already in the ledger is answered from it without touching DBOS; a child
whose workflow cannot be found is answered ``subagent_lost`` (see ``child_outcome``).

Order and determinism: the child phase is workflow code. Gates are exactly-once transactions; starts,
enqueues and sends are DBOS operations in workflow code (DBOS forbids them inside steps); all run in
reply order, before the step's local bodies, and the waits run in reply order after them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from dbos import DBOS, SetEnqueueOptions, SetWorkflowID

from ...definitions.limits import AgentLimits
from ...ledger import calls, events, rows
from ...ledger import runs as run_rows
from ...ledger import sessions as session_rows
from ...ledger.names import DELEGATE_RESULT_TX, DELEGATE_TX
from ...ledger.statuses import RUN_AT_REST
from ..floor import fence
from ..floor.durable import tx
from ..floor.gate import child_gate
from ..floor.records import ChildDone, ChildGate, ChildLost, RecordOutcome, RunGate
from ..floor.runs import RunOpening, open_run_row
from ..process import queues
from ..process.dbos_private import workflow_status as dbos_status
from ..process.faults import crash_point, fail_point
from .child_outcome import record_outcome, unavailable, wait_for_child

if TYPE_CHECKING:
    from ..floor.registry import Env, Registry


Gate = ChildGate


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a child run waits (``ChildGate``'s ``queue`` and ``partition``); both None: the children's queue."""

    queue: str | None = None
    partition: str | None = None


def placement(conn: sa.Connection, parent_session_id: str, child_agent: str, limits: Mapping[str, AgentLimits]) -> Placement:
    """Where a child run of ``child_agent`` waits: its agent's own entry queue when that agent has
    ``max_running`` (partitioned by the parent session's owner, as entries are), else the children's
    queue (``queue`` None). Decided in the gate's transaction, so a replay enqueues where the first
    execution did whatever the process's limits are by then."""
    queue = queues.child_queue(child_agent, limits)
    if queue is None:
        return Placement()
    parent = session_rows.get_session(conn, parent_session_id)
    return Placement(queue, queues.partition_key(parent["owner"] if parent is not None else None))


def _remote_gate(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str) -> Gate:
    """Decide (stop, recovery rules), commit the attempt, and on first dispatch mint and bind the child."""
    profile, executor_id, limits = env.profile, env.settings.executor_id, env.limits
    gate, call, sub = child_gate(conn, env, run_id, dispatch_id, "remote")
    if call is None:
        return gate
    if call["child_session_id"] is None:
        if sub is None:
            return unavailable(conn, run_id, gate, call["tool_name"])
        child_sid = rows.new_id()
        session_rows.insert_session(conn, child_sid, sub.agent.name, parent_dispatch_id=dispatch_id)
        session = session_rows.get_session(conn, child_sid)
        assert session is not None
        where = placement(conn, call["session_id"], sub.agent.name, limits)
        opened = open_run_row(conn, session, RunOpening(
            run_id=dispatch_id, entry="start", message=(call["args"] or {}).get("message", ""),
            max_steps=sub.agent.max_steps, recovery=profile, executor_id=executor_id, queued=where.queue is not None,
        ))
        assert opened, "a fresh child session has no other entry to race"
        calls.bind_child(conn, dispatch_id, child_sid)
        events.emit(conn, call["session_id"], run_id, "subagent_start",
                   {"dispatch_id": dispatch_id, "child_session_id": child_sid, "agent": sub.agent.name, "mode": "remote"})
        answer = replace(gate.answer, child_session_id=child_sid) if isinstance(gate.answer, RunGate) else gate.answer
        return replace(gate, answer=answer, attach="enqueue", queue=where.queue, partition=where.partition)
    # Re-attach. The ledger is asked first: an answered child is never enqueued again (its DBOS row
    # may have been deleted by retention, and a fresh row under the same id would run it twice).
    child = run_rows.get_run(conn, dispatch_id)
    if child is not None and child["status"] in RUN_AT_REST:
        return replace(gate, attach="answered")
    if dbos_status(conn, dispatch_id) is None:
        return replace(gate, attach="lost")
    where = placement(conn, call["session_id"], child["agent_name"], limits) if child is not None else Placement()
    return replace(gate, attach="enqueue", queue=where.queue, partition=where.partition)


async def dispatch(registry: Registry, run_id: str, dispatch_id: str, tool_name: str) -> Gate:
    """Workflow code: gate the delegation and enqueue (or re-attach to) the child's run workflow."""
    gate = await tx(DELEGATE_TX, _remote_gate, registry.env, run_id, dispatch_id, read_as=ChildGate)
    crash_point("child_gated", tool_name)  # the child is minted and bound, not yet enqueued
    if gate.action != "done" and gate.attach == "enqueue":
        await enqueue_child(registry, dispatch_id, gate.queue, gate.partition)
    return gate


async def enqueue_child(registry: Registry, dispatch_id: str, queue: str | None, partition: str | None) -> Any:
    """Workflow code: enqueue the child run workflow ``dispatch_id`` where its gate placed it; its handle.

    On its agent's entry queue (``max_running``) it counts against that limit like any entry; the
    parent holds its own slot while it waits, which is why a limited agent may not delegate to itself
    (``queues.delegation_cycles``). Enqueueing an existing id returns that workflow wherever it waits."""
    with SetWorkflowID(dispatch_id):
        if queue is None:
            return await DBOS.enqueue_workflow_async(registry.env.queue_name, registry.run_workflow, dispatch_id)
        with SetEnqueueOptions(queue_partition_key=queues.partition_key(partition)):
            return await DBOS.enqueue_workflow_async(queue, registry.run_workflow, dispatch_id)


async def settle(registry: Registry, run_id: str, gate: Gate) -> None:
    """Workflow code: wait for the child's outcome and answer the delegating call with it."""
    dispatch_id = gate.dispatch_id
    if gate.attach == "lost":
        outcome: ChildDone | ChildLost = ChildLost("not_found", "the sub-agent's workflow cannot be found")
    else:
        outcome = await wait_for_child(registry, run_id, dispatch_id)
    fail_point("child_result")
    fence.raise_if_refused(await tx(DELEGATE_RESULT_TX, record_outcome, registry.env, run_id, dispatch_id, gate.attempt, outcome, read_as=RecordOutcome))
