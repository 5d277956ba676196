"""Remote sub-agents, and the child phase of a saved step (remote children and companion turns).

A remote child's run is a ledger run *and* a DBOS workflow whose id is the parent call's dispatch id,
enqueued from the parent's workflow code on the runtime's queue, so any worker process serving that
queue can run it. The first dispatch mints the child's session (a fresh id, never derived from the
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

from collections.abc import Callable, Sequence
from typing import Any, Final

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID

from ..ledger import store
from ..ledger import tables as t
from ..ledger.statuses import RUN_AT_REST
from . import commits, companions, durable, fence
from .child_outcome import lost, record_outcome, unavailable, wait_for_child
from .durable import dbos_status, tx
from .faults import crash_point, fail_point
from .runs import open_run_row
from .state import env

#: Call kinds answered by a child workflow rather than a body step of the parent.
CHILD_KINDS: Final = frozenset({"remote", "companion"})

Gate = dict[str, Any]


def register(run_workflow: Callable[..., Any]) -> None:
    """Called by ``workflow.register`` before launch: bind the run workflow, register the companion's."""
    durable.bind_run_workflow(run_workflow)
    companions.register()


def _remote_gate(conn: sa.Connection, run_id: str, dispatch_id: str) -> Gate:
    """Decide (stop, recovery rules), commit the attempt, and on first dispatch mint and bind the child."""
    gate, call, sub = commits.child_gate(conn, run_id, dispatch_id, "remote")
    if call is None:
        return gate
    if call["child_session_id"] is None:
        if sub is None:
            return unavailable(conn, run_id, gate, call["tool_name"])
        child_sid = store.new_id()
        store.insert_session(conn, child_sid, sub.agent.name, parent_dispatch_id=dispatch_id)
        session = store.get_session(conn, child_sid)
        assert session is not None
        opened = open_run_row(
            conn, session, run_id=dispatch_id, entry="start", message=(call["args"] or {}).get("message", ""),
            max_steps=sub.agent.max_steps, recovery=env().profile, executor_id=env().settings.executor_id,
        )
        assert opened, "a fresh child session has no other entry to race"
        conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(child_session_id=child_sid))
        store.emit(conn, call["session_id"], run_id, "subagent_start",
                   {"dispatch_id": dispatch_id, "child_session_id": child_sid, "agent": sub.agent.name, "mode": "remote"})
        return {**gate, "child_session_id": child_sid, "attach": "enqueue"}
    # Re-attach. The ledger is asked first: an answered child is never enqueued again (its DBOS row
    # may have been deleted by retention, and a fresh row under the same id would run it twice).
    child = store.get_run(conn, dispatch_id)
    if child is not None and child["status"] in RUN_AT_REST:
        return {**gate, "attach": "answered"}
    if dbos_status(conn, dispatch_id) is None:
        return {**gate, "attach": "lost"}
    return {**gate, "attach": "enqueue"}


async def _dispatch_remote(run_id: str, dispatch_id: str, tool_name: str) -> Gate:
    gate: Gate = await tx("helix.delegate", _remote_gate, run_id, dispatch_id)
    crash_point("child_gated", tool_name)  # the child is minted and bound, not yet enqueued
    if gate["action"] != "done" and gate["attach"] == "enqueue":
        with SetWorkflowID(dispatch_id):
            await DBOS.enqueue_workflow_async(env().queue_name, durable.run_workflow(), dispatch_id)
    return gate


async def _settle_remote(run_id: str, gate: Gate) -> None:
    dispatch_id = gate["dispatch_id"]
    if gate["attach"] == "lost":
        state = lost("not_found", "the sub-agent's workflow cannot be found")
    else:
        state = await wait_for_child(run_id, dispatch_id)
    fail_point("child_result")
    fence.raise_if_refused(await tx("helix.delegate_result", record_outcome, run_id, dispatch_id, gate["attempt"], state))


async def dispatch_children(run_id: str, calls: Sequence[dict[str, Any]]) -> list[Gate]:
    """Workflow code: gate and start (or re-attach, or re-send to) every child call, in reply order."""
    gates: list[Gate] = []
    for call in sorted(calls, key=lambda c: c["position"]):
        if call["kind"] == "remote":
            gate = await _dispatch_remote(run_id, call["dispatch_id"], call["tool_name"])
        else:
            gate = await companions.dispatch(run_id, call["dispatch_id"], call["tool_name"])
        crash_point("child_dispatched", call["tool_name"])
        gates.append(gate)
    return gates


async def settle_children(run_id: str, gates: Sequence[Gate]) -> None:
    """Workflow code: wait for each dispatched child in reply order and answer its call."""
    for gate in gates:
        if gate["action"] == "done":
            continue
        if gate["kind"] == "remote":
            await _settle_remote(run_id, gate)
        else:
            await companions.settle(run_id, gate)
