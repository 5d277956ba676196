"""The attempt gate and the result write: a call's two facts, each one short ledger transaction.

The gate is a body's first act: it decides by the recovery rules whether the body runs (and commits
the attempt before it starts), or answers the call without one. The result write is fenced twice:
by its attempt number and by its run still owning the session. Delegating calls (remote children,
companion turns) pass the same gate.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ...ledger import attempts as attempt_rows
from ...ledger import calls as call_rows
from ...ledger import events, rows
from ...ledger import runs as run_rows
from ...ledger.records import CallRow, CheckOutcome, CheckVerdict
from ...ledger.statuses import CALL_SETTLED, CallKind, CallStatus
from ...recovery.decide import BodyAction
from . import fence, step_memo
from .fence import FenceHead
from .pairing import calls_of_step, decisions, mark_proved
from .records import CheckRecorded, ChildGate, DoneGate, GateOutcome, ReconcileGate, RecordOutcome, RunGate
from .registry import Env


def gate(
    conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, token: str | None = None, *, retried: bool = True, where: tuple[str, int] | None = None
) -> GateOutcome:
    """A body's first act: decide, and if it runs, commit the attempt before the body starts.

    ``env``: the launch's agents (the call's tool as the code defines it now), recovery profile
    and executor id (the attempt's).

    Idempotent per ``token``: if this gate execution's attempt is already committed (its
    acknowledgement was lost and the transaction runs again), the body goes ahead under that attempt.

    Without the token the retry would find a running call with an attempt and no result, which is
    exactly what a crashed body looks like: an unsafe call would be paired ``outcome_unknown`` and a
    safe one would run a second body, though neither had started. Only a retried transaction can
    find its own attempt, so the first try does not look.
    """
    mine = attempt_rows.attempt_by_token(conn, dispatch_id, token) if retried and token is not None else None
    if mine is not None:
        fence.check(conn, run_id, "attempt gate")
        call = call_rows.get_call(conn, dispatch_id)
        run = run_rows.get_run(conn, run_id)
        assert call is not None and run is not None
        if call["status"] != "running" or call["attempts"] != mine["attempt"]:
            return DoneGate(call["status"])  # answered meanwhile (a stop, a recovery)
        tool = env.agent(run["agent_name"]).tool(call["tool_name"])
        return _goes_ahead("run", mine["attempt"], call, run["agent_name"], tool is not None and tool.transactional)
    return _decide(conn, env, run_id, dispatch_id, token, where)


def _goes_ahead(action: BodyAction, attempt: int, call: CallRow, agent_name: str, transactional: bool) -> RunGate:
    """The gate's answer when the body goes ahead, built here only: a first gate and a retried one
    (``gate`` finding its own attempt) hand the body the same facts, the call's approval among them."""
    return RunGate(action=action, attempt=attempt, args=call["args"], tool_call_id=call["tool_call_id"], tool_name=call["tool_name"],
                   session_id=call["session_id"], child_session_id=call["child_session_id"], agent_name=agent_name,
                   transactional=transactional, replay=call["replay"], approved=call["approved"])


def _decide(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, token: str | None, where: tuple[str, int] | None) -> GateOutcome:
    """Decide by the recovery rules, and if the body runs, commit the attempt before it starts.

    Two reads: the fence's (the run, its session's lock, its stop record, DBOS's cancel) and the
    call's step (the call and its siblings, which the recovery rules judge it among)."""
    run, calls = _fenced_step(conn, run_id, dispatch_id, where)
    call = next(c for c in calls if c["dispatch_id"] == dispatch_id)
    if call["status"] in CALL_SETTLED:
        return DoneGate(call["status"], settled_before=True)
    agent = env.agent(run["agent_name"])
    if run["stop_kind"] is not None:
        step_memo.forget(conn)
        d = decisions(agent, env.profile, calls, "stop")[dispatch_id]  # a body that started and left no result: outcome_unknown
        assert d.status is not None
        mark_proved(conn, dispatch_id, d)
        call_rows.settle_call(conn, call, d.status, run_id=run_id, paired_by="stop", note=d.note, reason=d.reason)
        return DoneGate(d.status)
    d = decisions(agent, env.profile, calls, "recover")[dispatch_id]
    if d.action in ("run", "run_again", "reattach", "reenter"):
        mark_proved(conn, dispatch_id, d)
        tool = agent.tool(call["tool_name"])
        transactional = tool is not None and tool.transactional
        at = rows.now()
        attempt = attempt_rows.start_attempt(conn, call, run_id, env.settings.executor_id, transactional=transactional, token=token, at=at)
        if d.action == "run" and d.decided_by is None:  # the attempt is the only change: the step's kept read stays true
            step_memo.started(conn, dispatch_id, attempt, at, transactional=transactional)
        else:
            step_memo.forget(conn)
        if d.action != "run":
            events.emit(conn, call["session_id"], run_id, "recovery",
                       {"dispatch_id": dispatch_id, "action": d.action, "reason": d.reason, "decided_by": d.decided_by})
        return _goes_ahead(d.action, attempt, call, run["agent_name"], transactional)
    step_memo.forget(conn)  # a pairing, a stop's answer or a reconcile: read the step again
    if d.action == "reconcile":
        # Ask the outside system (the body does, outside this transaction), record the verdict, gate again.
        return ReconcileGate(attempts=call["attempts"], args=call["args"], tool_name=call["tool_name"],
                             session_id=call["session_id"], agent_name=run["agent_name"], reason=d.reason)
    if d.action == "pair":
        assert d.status is not None
        mark_proved(conn, dispatch_id, d)
        call_rows.settle_call(conn, call, d.status, run_id=run_id, paired_by="recovery", note=d.note, reason=d.reason)
        return DoneGate(d.status)
    return DoneGate(call["status"])


def _fenced_step(conn: sa.Connection, run_id: str, dispatch_id: str, where: tuple[str, int] | None) -> tuple[FenceHead, list[CallRow]]:
    """The fence (the run's ``agent_name`` and ``stop_kind`` are what the gate reads of it) and the
    calls of the step ``dispatch_id`` belongs to, locked, the saver and step given by the workflow (a
    delegating call's gate looks them up): ``fence.step_calls``, one read when the fence passes."""
    if where is not None:
        key = (run_id, where[0], where[1], True)
        kept = step_memo.recall(conn, key)
        if kept is not None:  # a sibling's gate read the step in this transaction (``step_memo``)
            return kept
        head, calls = fence.step_calls(conn, run_id, where[0], where[1], "attempt gate", for_update=True)
        step_memo.keep(conn, key, head, calls)
        return head, calls
    fenced = fence.check(conn, run_id, "attempt gate")
    saver = call_rows.step_of(conn, dispatch_id)
    assert saver is not None
    return {"agent_name": fenced["agent_name"], "stop_kind": fenced["stop_kind"]}, calls_of_step(conn, saver[0], saver[1], for_update=True)


def record_check(conn: sa.Connection, run_id: str, dispatch_id: str, attempts: int, verdict: CheckVerdict) -> CheckRecorded:
    """Commit what a reconcile check answered about the call's latest attempt, before anything acts
    on it; ``applied`` settles the call ``ok`` with the check's result in the same transaction.

    A gate run again (or a replay, a redirect's or a failure's pairing) then reads the verdict instead
    of asking again. A verdict about an attempt that is no longer the latest (or a call already
    answered) is dropped.

    A ``queued`` run passes the fence: a redirect asks its checks before its entry's first
    transaction (``prepare_entry``, which turns it running) and records them then, as that entry's
    own read of the checks does (``commits.redirect_checks``). Turning the run running first would
    show it running with its saved calls not yet paired; the verdict changes only the call's row.
    """
    fence.check(conn, run_id, "reconcile verdict", admit_queued=True)
    call = call_rows.get_call(conn, dispatch_id, for_update=True)
    assert call is not None
    if call["status"] in CALL_SETTLED or call["attempts"] != attempts:
        return CheckRecorded(call["status"], recorded=False)
    outcome: CheckOutcome = {**verdict, "attempt": attempts, "at": rows.now().isoformat()}
    call_rows.record_check(conn, call, outcome)
    events.emit(conn, call["session_id"], run_id, "reconciled",
               {"dispatch_id": dispatch_id, "tool_name": call["tool_name"], "attempt": attempts, **verdict})
    if verdict["verdict"] == "applied":
        call_rows.mark_decided(conn, dispatch_id, "check")
        attempt_rows.close_open_attempts(conn, dispatch_id, "applied")
        call_rows.settle_call(conn, call, "ok", run_id=run_id, paired_by="recovery", result=verdict.get("result"), reason="check: applied")
        return CheckRecorded("ok", recorded=True)
    return CheckRecorded(call["status"], recorded=True)


def child_gate(conn: sa.Connection, env: Env, run_id: str, dispatch_id: str, kind: CallKind) -> tuple[ChildGate, CallRow | None, Any]:
    """The gate of a call that delegates (remote child, companion turn): the decision, and if it
    goes ahead, the call's row and its sub-agent as the code defines it now (None if removed)."""
    decided = ChildGate(dispatch_id, kind, gate(conn, env, run_id, dispatch_id))
    if isinstance(decided.answer, DoneGate):
        return decided, None, None
    call = call_rows.get_call(conn, dispatch_id)
    parent = run_rows.get_run(conn, run_id)
    assert call is not None and parent is not None
    return decided, call, env.agent(parent["agent_name"]).sub_agent(call["tool_name"])


def record(
    conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, status: CallStatus, result: Any, error: Any, *, tool_name: str | None = None
) -> RecordOutcome:
    """A body's result, fenced twice: by its attempt number and by its run still owning the session.

    A refused write still closes its attempt (``refused``): attempts never stay open. With the
    call's ``tool_name`` (what its ``tool_end`` event names), the write that goes through takes the
    short path (``attempts.record_result_fenced``: the fence inside the write); one that does not, or a
    workflow that is not the run's own (a fork), takes the full one, which says why.
    """
    step_memo.forget(conn)  # a result changes its call: a later gate of the transaction reads the step again
    if (
        tool_name is not None
        and fence.is_own_workflow(run_id)
        and attempt_rows.record_result_fenced(conn, dispatch_id, attempt, run_id, status, tool_name, result=result, error=error)
    ):
        return RecordOutcome(status, written=True)
    reason = fence.refused(conn, run_id)
    if reason is not None:
        attempt_rows.refuse_attempt(conn, dispatch_id, attempt)
        return RecordOutcome("refused", written=False, refused=f"result write refused: {reason}")
    written = attempt_rows.record_result(conn, dispatch_id, attempt, run_id, status, result=result, error=error)
    if written:
        return RecordOutcome(status, written=True)
    call = call_rows.get_call(conn, dispatch_id)
    assert call is not None
    return RecordOutcome(call["status"], written=False)


def record_once(
    conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, status: CallStatus, result: Any, error: Any, *, retried: bool = True,
    tool_name: str | None = None,
) -> RecordOutcome:
    """The result write, idempotent: a retry whose first try committed finds its own answer written
    (only a retried transaction can, so the first try does not look)."""
    call = call_rows.get_call(conn, dispatch_id) if retried else None
    if call is not None and call["attempts"] == attempt and call["paired_by"] == "body" and call["status"] == status:
        outcome = attempt_rows.attempts_of(conn, [dispatch_id]).get(dispatch_id, [])
        if any(a["attempt"] == attempt and a["outcome"] == status for a in outcome):
            return RecordOutcome(status, written=True)
    return record(conn, run_id, dispatch_id, attempt, status, result, error, tool_name=tool_name)
