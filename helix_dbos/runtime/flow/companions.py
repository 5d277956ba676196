"""Persistent companions: one child session kept across the parent's calls, each call one turn of it.

Shape (see docs/subagents.md for the decision record):

- A companion is the pair (parent session, companion agent): the first call mints its session and a
  ``companions`` row; every later call of that parent session to that agent is a turn of the same
  session, so the companion remembers earlier turns.
- The companion is a long-lived DBOS workflow (``helix.companion``), enqueued on the runtime's queue
  by the parent's workflow code. It receives turns by ``DBOS.recv`` (topic ``helix.turn``) and runs
  each turn as a child workflow, the ordinary run workflow, whose id and run id are the parent
  call's dispatch id; turns of one companion run one at a time, in arrival order. When the
  companion's agent has ``max_running``, a turn is enqueued on that agent's entry queue instead of
  started in place, so the limit counts it (the companion workflow itself holds no slot).
- The parent's gate (an exactly-once transaction) commits the attempt, makes sure a live incarnation
  exists (starting the next one when the last idled out, ended, or was lost), and records which
  companion answers the call; then the parent's workflow code starts the incarnation if new and sends
  the turn (``idempotency_key=<dispatch id>:<attempt>``). The answer is the turn run's ledger row.

Why nothing is done twice:

- The parent's send is a recorded DBOS operation: a replay of the same parent run does not send
  again. A re-entry by a later run (``retry``, ``resume``) gates again: a turn already answered is
  answered from the ledger and one already begun is awaited, both without a send; only a turn that
  never began is sent again, under the new attempt's idempotency key (the key carries the attempt so
  that this re-send reaches a companion that dropped the earlier message because the parent had
  stopped waiting at the time).
- The companion looks the turn up in the ledger before running it: a turn with a run row is never
  started again (``_begin_turn``), and the run workflow's id is the dispatch id, so even a duplicate
  message that reached another incarnation re-awaits the same run instead of starting a second one.
- An incarnation closes only in a transaction that finds no turn waiting for it, under the same row
  lock the parent's gate takes, so a turn is never sent to a companion that has already decided to end.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Final, Literal, TypedDict

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID

from ...ledger import calls, events, rows
from ...ledger import calls as call_rows
from ...ledger import companions as companion_rows
from ...ledger import runs as run_rows
from ...ledger import sessions as session_rows
from ...ledger.names import (
    COMPANION_BEGIN_TX,
    COMPANION_CLOSE_TX,
    COMPANION_END_TX,
    COMPANION_GATE_TX,
    COMPANION_RESULT_TX,
    COMPANION_WORKFLOW,
    TURN_TOPIC,
)
from ...ledger.statuses import CALL_SETTLED, RUN_AT_REST, RUN_LIVE
from ..floor import durable, fence
from ..floor.durable import DBOS_TERMINAL, tx
from ..floor.gate import child_gate
from ..floor.records import ChildDone, ChildGate, ChildLost, RecordOutcome, TurnBegun
from ..floor.runs import RunOpening, open_run_row
from ..process.dbos_private import workflow_status as dbos_status
from ..process.faults import crash_point, fail_point
from .child_outcome import record_outcome, unavailable, wait_for_child
from .children import Placement, enqueue_child, placement

if TYPE_CHECKING:
    from ..floor.registry import Env, Registry

log = logging.getLogger("helix_dbos")

#: Turns one incarnation serves before it ends (when idle) and the next call starts a fresh one: a DBOS
#: workflow replays its whole history on recovery, so an incarnation's history is kept short.
MAX_TURNS_PER_INCARNATION: Final = 100



class Closed(TypedDict):
    """An incarnation's end (the companion workflow's output), or whether it may end now (``closed``)."""

    closed: bool


class Served(TypedDict):
    """The companion workflow's output: it closed after serving ``turns`` turns."""

    status: Literal["closed"]
    turns: int


class TurnEnded(TypedDict):
    answered: bool


def register(registry: Registry) -> None:
    """Register the companion workflow, bound to ``registry``, with the DBOS instance about to launch.

    DBOS finds it by name (``helix.companion``) on recovery; the function under that name closes
    over the registry of the runtime that launched, which the parent's dispatch enqueues it from.
    """

    async def companion(companion_session_id: str, idle: float) -> Served:
        return await _companion(registry, companion_session_id, idle)

    registry.bind_companion_workflow(DBOS.workflow(name=COMPANION_WORKFLOW)(durable.workflow_function(companion, registry)))


def workflow_id_of(companion_session_id: str, incarnation: int) -> str:
    return f"companion-{companion_session_id}-{incarnation}"


# --- the parent's side -------------------------------------------------------------------------------


def _parent_gate(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, idle: float) -> ChildGate:
    """The call's gate, then: the companion (minted on first use), a live incarnation, and the binding."""
    gate, call, sub = child_gate(conn, env, run_id, dispatch_id, "companion")
    if call is None:
        return gate
    if call["child_session_id"] is not None:
        comp = companion_rows.get(conn, companion_session_id=call["child_session_id"], for_update=True)
    elif sub is not None:
        comp = companion_rows.get(conn, parent_session_id=call["session_id"], agent_name=sub.agent.name, for_update=True)
    else:
        return unavailable(conn, run_id, gate, call["tool_name"])
    ts = rows.now()
    start = False
    if comp is None:
        assert sub is not None
        sid = rows.new_id()
        session_rows.insert_session(conn, sid, sub.agent.name, parent_dispatch_id=dispatch_id)
        comp = {
            "companion_session_id": sid,
            "parent_session_id": call["session_id"],
            "agent_name": sub.agent.name,
            "tool_name": call["tool_name"],
            "incarnation": 1,
            "workflow_id": workflow_id_of(sid, 1),
            "status": "live",
            "first_dispatch_id": dispatch_id,
            "created_at": ts,
            "updated_at": ts,
        }
        companion_rows.insert(conn, dict(comp))
        start = True
        events.emit(conn, call["session_id"], run_id, "subagent_start",
                   {"dispatch_id": dispatch_id, "child_session_id": sid, "agent": sub.agent.name, "mode": "companion"})
    elif comp["status"] != "live" or (dbos_status(conn, comp["workflow_id"]) or "SUCCESS") in DBOS_TERMINAL:
        # Idled out, served its turns, or its workflow ended or vanished: the next incarnation takes over.
        incarnation = int(comp["incarnation"]) + 1
        comp["incarnation"], comp["workflow_id"], comp["status"] = incarnation, workflow_id_of(comp["companion_session_id"], incarnation), "live"
        companion_rows.new_incarnation(conn, comp["companion_session_id"], incarnation, comp["workflow_id"], ts)
        start = True
        events.emit(conn, call["session_id"], run_id, "companion_incarnation",
                   {"dispatch_id": dispatch_id, "child_session_id": comp["companion_session_id"], "incarnation": incarnation})
    sid = comp["companion_session_id"]
    if call["child_session_id"] is None:
        calls.bind_child(conn, dispatch_id, sid)
    turn = run_rows.get_run(conn, dispatch_id)
    # answered: read it from the ledger; begun: wait for it; otherwise (re-)send the turn.
    attach: Literal["send", "answered", "await"] = "send" if turn is None else ("answered" if turn["status"] in RUN_AT_REST else "await")
    return replace(gate, attach=attach, start=start, companion_session_id=sid, workflow_id=comp["workflow_id"], idle=idle)


async def dispatch(registry: Registry, run_id: str, dispatch_id: str, tool_name: str) -> ChildGate:
    """Workflow code: gate, start the incarnation if it is new, send the turn (idempotent by dispatch id)."""
    gate = await tx(COMPANION_GATE_TX, _parent_gate, registry.env, run_id, dispatch_id, registry.env.environment.companion_idle_seconds, read_as=ChildGate)
    crash_point("child_gated", tool_name)  # bound to its companion, not yet sent
    if gate.action == "done" or gate.attach != "send":
        return gate
    assert gate.workflow_id is not None  # a turn to send names its incarnation
    if gate.start:
        with SetWorkflowID(gate.workflow_id):
            await DBOS.enqueue_workflow_async(registry.env.queue_name, registry.companion_workflow, gate.companion_session_id, gate.idle)
    # Keyed by attempt too: a replay of this attempt never sends twice, while a re-entry (a later attempt)
    # does reach the companion even if it already dropped this turn's earlier message (see _begin_turn).
    await DBOS.send_async(gate.workflow_id, {"dispatch_id": dispatch_id}, TURN_TOPIC,
                          idempotency_key=f"{dispatch_id}:{gate.attempt}")
    return gate


def _record(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, attempt: int, state: ChildDone | ChildLost, workflow_id: str) -> RecordOutcome:
    out = record_outcome(conn, env, run_id, dispatch_id, attempt, state)
    if out.refused:
        return out
    if isinstance(state, ChildLost) and state.cause == "companion_gone":
        companion_rows.mark_lost(conn, workflow_id)
    return out


async def settle(registry: Registry, run_id: str, gate: ChildGate) -> None:
    """Workflow code: wait for the turn's run (or its loss) and answer the parent call from the ledger."""
    dispatch_id, workflow_id = gate.dispatch_id, gate.workflow_id
    assert workflow_id is not None  # a companion's gate that goes ahead names its incarnation
    state = await wait_for_child(registry, run_id, dispatch_id, workflow_id)
    fail_point("child_result")
    fence.raise_if_refused(await tx(COMPANION_RESULT_TX, _record, registry.env, run_id, dispatch_id, gate.attempt, state, workflow_id, read_as=RecordOutcome))


# --- the companion's side --------------------------------------------------------------------------


def _begin_turn(conn: sa.Connection, registry: Registry, companion_session_id: str, dispatch_id: str) -> TurnBegun:
    """Run a turn at most once: a turn with a run row is re-awaited or answered, never started again."""
    turn = run_rows.get_run(conn, dispatch_id)
    comp = companion_rows.get(conn, companion_session_id=companion_session_id)
    where = placement(conn, comp["parent_session_id"], turn["agent_name"] if turn else comp["agent_name"], registry.env.limits) if comp else Placement()
    if turn is not None:
        return TurnBegun("await" if turn["status"] in RUN_LIVE else "answered", where.queue, where.partition)
    call = call_rows.get_call(conn, dispatch_id)
    if call is None or call["child_session_id"] != companion_session_id or call["status"] in CALL_SETTLED:
        # The parent stopped waiting (its call was answered for it): nobody needs this turn any more.
        return TurnBegun("dropped")
    session = session_rows.get_session(conn, companion_session_id, for_update=True)
    assert session is not None
    env = registry.env
    agent = env.agent(session["agent_name"])
    claimed = open_run_row(conn, session, RunOpening(
        run_id=dispatch_id, entry="start" if int(session["run_count"]) == 0 else "turn",
        message=(call["args"] or {}).get("message", ""), max_steps=agent.max_steps, recovery=env.profile,
        executor_id=env.settings.executor_id, queued=where.queue is not None,
    ))
    assert claimed, "the companion session is only entered by its own workflow, under its row lock"
    return TurnBegun("run", where.queue, where.partition)


def _end_turn(conn: sa.Connection, companion_session_id: str, dispatch_id: str) -> TurnEnded:
    """Record the turn as the last one answered; a turn whose workflow ended without an outcome is failed."""
    turn = run_rows.get_run(conn, dispatch_id)
    if turn is None:
        return {"answered": False}
    if turn["status"] in RUN_LIVE:
        run_rows.end_run(conn, dispatch_id, "failed", error_code="subagent_lost", error="the turn's workflow ended without an outcome")
    companion_rows.turn_answered(conn, companion_session_id, dispatch_id)
    return {"answered": True}


def _close_if_idle(conn: sa.Connection, companion_session_id: str, workflow_id: str) -> Closed:
    """End this incarnation unless a turn is waiting for it (same row lock as the parent's gate)."""
    comp = companion_rows.get(conn, companion_session_id=companion_session_id, for_update=True)
    if comp is None or comp["workflow_id"] != workflow_id:
        return {"closed": True}  # a newer incarnation took over: this one has nothing left to serve
    if companion_rows.waiting_turns(conn, companion_session_id):
        return {"closed": False}
    companion_rows.close(conn, companion_session_id)
    events.emit(conn, comp["parent_session_id"], None, "companion_closed",
               {"child_session_id": companion_session_id, "incarnation": comp["incarnation"]})
    return {"closed": True}


async def _companion(registry: Registry, companion_session_id: str, idle: float) -> Served:
    """The long-lived companion: receive a turn, run it once as a child run workflow, repeat; end when idle."""
    me = DBOS.workflow_id
    assert me is not None
    served = 0
    while True:
        full = served >= MAX_TURNS_PER_INCARNATION
        if full and (await tx(COMPANION_CLOSE_TX, _close_if_idle, companion_session_id, me))["closed"]:
            return {"status": "closed", "turns": served}
        message = await DBOS.recv_async(TURN_TOPIC, timeout_seconds=idle)
        if message is None:
            if (await tx(COMPANION_CLOSE_TX, _close_if_idle, companion_session_id, me))["closed"]:
                return {"status": "closed", "turns": served}
            continue
        dispatch_id = str(message["dispatch_id"])
        begun = await tx(COMPANION_BEGIN_TX, _begin_turn, registry, companion_session_id, dispatch_id, read_as=TurnBegun)
        if begun.action in ("run", "await"):
            if begun.queue is not None:  # the agent's limit counts its turns: they wait on its entry queue
                handle = await enqueue_child(registry, dispatch_id, begun.queue, begun.partition)
            else:
                with SetWorkflowID(dispatch_id):
                    handle = await DBOS.start_workflow_async(registry.run_workflow, dispatch_id)
            try:
                await handle.get_result(polling_interval_sec=durable.poll_interval(registry))
            except Exception:  # cancelled or dead-lettered turn: _end_turn answers it as lost
                log.warning("companion %s: turn %s ended without a result", companion_session_id, dispatch_id, exc_info=True)
        await tx(COMPANION_END_TX, _end_turn, companion_session_id, dispatch_id)
        served += 1


__all__ = ["dispatch", "register", "settle"]
