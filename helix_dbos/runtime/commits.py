"""The run's durable boundaries, each one database transaction over the ledger.

The workflow calls these inside DBOS datasource transactions (exactly once: a replay returns the
recorded output instead of writing again) and the call bodies call the attempt gate and the result
write inside their own steps. Every function here takes a blocking connection already in a
transaction and returns plain JSON, which is what DBOS records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..definitions import Agent
from ..ledger import store
from ..ledger import tables as t
from ..ledger.statuses import BODY_KINDS, CALL_SETTLED, REDIRECTING_ENTRIES
from ..recovery import Decision, SavedCall, ToolNow, decide
from . import fence, transcript
from .planning import Planned, reply_text
from .state import env

Row = dict[str, Any]
TEXT_NOT_ALLOWED = "Plain text responses are not permitted, please include your response in a tool call"


def tools_now(agent: Agent) -> dict[str, ToolNow]:
    return {tool.name: ToolNow(tool.name, tool.replay, tool.accepts, tool.reconcile is not None) for tool in agent.tools}


def _check_of(row: Row) -> Any:
    """The check's verdict about the call's latest attempt; an answer about an older one is stale."""
    outcome = row.get("check_outcome")
    if isinstance(outcome, dict) and outcome.get("attempt") == row["attempts"]:
        return outcome.get("verdict")
    return None


def saved_call(row: Row) -> SavedCall:
    return SavedCall(
        dispatch_id=row["dispatch_id"],
        position=row["position"],
        tool_name=row["tool_name"],
        kind=row["kind"],
        replay=row["replay"],
        status=row["status"],
        attempts=row["attempts"],
        args=row["args"],
        concurrency_group=row["concurrency_group"],
        sequential=bool(row["sequential"]),
        requires_approval=bool(row["requires_approval"]),
        approved=row["approved"],
        paired_by=row["paired_by"],
        transactional=bool(row.get("transactional")),
        check=_check_of(row),
    )


def calls_of_step(conn: sa.Connection, run_id: str, step: int, *, for_update: bool = False) -> list[Row]:
    """The calls one run saved at one step (a run is linear, so (run, step) names one reply)."""
    stmt = sa.select(t.calls).where(t.calls.c.run_id == run_id, t.calls.c.step == step).order_by(t.calls.c.position)
    if for_update and conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return store.fetch_all(conn, stmt)


def _decisions(conn: sa.Connection, agent: Agent, calls: Sequence[Row], entry: str) -> dict[str, Decision]:
    out = decide([saved_call(c) for c in calls], tools_now(agent), entry, env().profile)  # type: ignore[arg-type]
    return {d.dispatch_id: d for d in out}


_PROVED_OUTCOME = {"database": "rolled_back", "check": "not_applied"}


def _mark_proved(conn: sa.Connection, dispatch_id: str, d: Decision) -> None:
    """Record what proved the outcome, and close the attempts it proved had no effect."""
    if d.decided_by is not None:
        store.mark_decided(conn, dispatch_id, d.decided_by)
        store.close_open_attempts(conn, dispatch_id, _PROVED_OUTCOME[d.decided_by])


def _apply_pairings(conn: sa.Connection, run_id: str, calls: Sequence[Row], decisions: dict[str, Decision], paired_by: str) -> None:
    for call in calls:
        d = decisions[call["dispatch_id"]]
        if d.action == "pair":
            assert d.status is not None
            _mark_proved(conn, call["dispatch_id"], d)  # before the settle, which closes what is left open as lost
            store.settle_call(conn, call, d.status, run_id=run_id, paired_by=paired_by, note=d.note, reason=d.reason)


def step_ref(conn: sa.Connection, cp: Row | None) -> dict[str, Any] | None:
    """The saved step a checkpoint stands at (the run that saved its calls, and the step), if any.

    A ``step`` checkpoint answered its step: nothing to recover. A suspension may be committed by a
    later run that recovered the step, so its calls are found by step among the session's active
    checkpoints, not by the run that wrote the suspension.
    """
    if cp is None or cp["kind"] == "step":
        return None
    if cp["kind"] == "append":
        return {"run_id": cp["run_id"], "step": cp["step"]}
    active = sa.select(t.checkpoints.c.checkpoint_id).where(
        t.checkpoints.c.session_id == cp["session_id"], t.checkpoints.c.superseded_by.is_(None)
    )
    saver = conn.execute(
        sa.select(t.calls.c.run_id)
        .where(t.calls.c.session_id == cp["session_id"], t.calls.c.step == cp["step"], t.calls.c.checkpoint_id.in_(active))
        .limit(1)
    ).scalar()
    return {"run_id": saver or cp["run_id"], "step": cp["step"]}


def open_steps(conn: sa.Connection, run: Row) -> list[dict[str, Any]]:
    """Steps with unanswered calls that a failing or stopping run must answer: its own, and the
    saved step it was recovering (saved by an earlier run)."""
    refs = {(c["run_id"], c["step"]) for c in store.unresolved_calls_of_run(conn, run["run_id"])}
    latest = step_ref(conn, store.latest_checkpoint(conn, run["session_id"]))
    if latest is not None:
        refs.add((latest["run_id"], latest["step"]))
    return [{"run_id": r, "step": s} for r, s in sorted(refs, key=lambda ref: ref[1])]


# --- entry ------------------------------------------------------------------------------------


def _pair_left_behind(conn: sa.Connection, run_id: str, agent: Agent) -> None:
    """Answer every unanswered call of the branch a rewind just superseded, in the rewind's transaction.

    No run will ever reach those calls again (entries and answers follow the active branch), so a
    pending approval or client call there would stay ``pending`` for ever, listed as waiting and
    refused when answered. They are paired as a redirect pairs them (``not_started`` if no body ever
    started, else ``outcome_unknown``; a client call ``outcome_unknown``), by the pure recovery function.
    """
    superseded = sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.superseded_by == run_id)
    steps = conn.execute(
        sa.select(t.calls.c.run_id, t.calls.c.step)
        .where(t.calls.c.checkpoint_id.in_(superseded), t.calls.c.status.not_in(CALL_SETTLED))
        .distinct()
    ).all()
    for saver, step in sorted(steps, key=lambda ref: (ref[1], ref[0])):
        calls = calls_of_step(conn, saver, step)
        _apply_pairings(conn, run_id, calls, _decisions(conn, agent, calls, "redirect"), "rewind")


def prepare_entry(conn: sa.Connection, run_id: str) -> dict[str, Any]:
    """Apply the entry to the ledger and say where the run starts: at the model, or recovering a step."""
    run = fence.check(conn, run_id, "prepare")
    sid, entry, agent = run["session_id"], run["entry"], env().agent(run["agent_name"])
    plan: dict[str, Any] = {
        "session_id": sid,
        "agent_name": run["agent_name"],
        "entry": entry,
        "max_steps": run["max_steps"],
        "mode": "model",
        "recover": None,
    }
    target = store.latest_checkpoint(conn, sid)
    if run["checkpoint_id"]:
        target = store.get_checkpoint(conn, run["checkpoint_id"])
        assert target is not None
        store.rewind_to(conn, target, run_id)
        _pair_left_behind(conn, run_id, agent)
    store.emit(conn, sid, run_id, "run_status", {"status": "running", "entry": entry})
    ref = step_ref(conn, target)

    if entry in REDIRECTING_ENTRIES:
        if ref is not None:
            calls = calls_of_step(conn, ref["run_id"], ref["step"])
            _apply_pairings(conn, run_id, calls, _decisions(conn, agent, calls, "redirect"), "redirect")
            calls = calls_of_step(conn, ref["run_id"], ref["step"])
            body = transcript.dump(transcript.results_message(calls, run["entry_message"]))
            store.insert_message(conn, sid, run_id, ref["step"], "request", body)
            store.insert_checkpoint(conn, sid, run_id, ref["step"], "step")
        elif run["entry_message"] is not None:
            store.insert_message(conn, sid, run_id, None, "request", transcript.dump(transcript.user_message(run["entry_message"])))
    elif entry == "start":
        if run["entry_message"] is not None:
            store.insert_message(conn, sid, run_id, None, "request", transcript.dump(transcript.user_message(run["entry_message"])))
    elif ref is not None:  # resume_continue, resume_from_checkpoint, retry: recover the saved step
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if entry == "retry":
            decisions = _decisions(conn, agent, calls, "retry")
            for call in calls:
                if call["status"] in CALL_SETTLED and decisions[call["dispatch_id"]].action != "keep":
                    store.reopen_call(conn, call)
                    store.emit(conn, sid, run_id, "call_reopened", {"dispatch_id": call["dispatch_id"]})
        plan["mode"] = "recover"
        plan["recover"] = ref
    plan["step"] = ref["step"] + 1 if plan["mode"] == "recover" and ref else store.next_step(conn, sid)
    return plan


# --- saving a reply ----------------------------------------------------------------------------


def _insert_planned(conn: sa.Connection, run_id: str, sid: str, step: int, checkpoint_id: str, planned: Sequence[Planned]) -> list[Row]:
    """Mint a dispatch id per call and commit the calls with the reply: the save-first record."""
    rows = []
    for p in planned:
        rows.append(
            {
                "dispatch_id": store.new_id(),
                "session_id": sid,
                "run_id": run_id,
                "checkpoint_id": checkpoint_id,
                "step": step,
                "position": p["position"],
                "tool_call_id": p["tool_call_id"],
                "tool_name": p["tool_name"],
                "kind": p["kind"],
                "args": p["args"],
                "replay": p["replay"],
                "concurrency_group": p["concurrency_group"],
                "sequential": p["sequential"],
                "requires_approval": p["requires_approval"],
                "transactional": bool(p.get("transactional")),
                "status": p["status"],
                "result": p["result"],
                "error": p["error"],
                "paired_by": p["paired_by"],
                "settled_run_id": run_id if p["status"] in CALL_SETTLED else None,
            }
        )
    store.insert_calls(conn, rows)
    for r in rows:
        kind = "approval_requested" if r["requires_approval"] else ("client_call" if r["kind"] == "client" else "call_saved")
        store.emit(conn, sid, run_id, kind, {k: r[k] for k in ("dispatch_id", "tool_name", "kind", "args", "status", "position")})
    return rows


def _save_reply(conn: sa.Connection, run_id: str, sid: str, step: int, reply: dict[str, Any]) -> None:
    store.insert_message(conn, sid, run_id, step, "response", reply["response"])
    store.record_usage(conn, sid, run_id, step, reply.get("model_name"), reply.get("usage") or {})
    store.count_run_step(conn, run_id)
    text = reply_text(transcript.load_response(reply["response"]))
    if text:
        store.emit(conn, sid, run_id, "model_text", {"step": step, "text": text})


def append_checkpoint(conn: sa.Connection, run_id: str, sid: str, step: int, reply: dict[str, Any], planned: list[Planned]) -> dict[str, Any]:
    """Save first: the reply and every call (arguments, policy now, fresh dispatch id) before any body."""
    fence.check(conn, run_id, "append")
    checkpoint_id = store.new_checkpoint_id()
    _save_reply(conn, run_id, sid, step, reply)
    rows = _insert_planned(conn, run_id, sid, step, checkpoint_id, planned)
    store.insert_checkpoint(conn, sid, run_id, step, "append", checkpoint_id)
    return {"run_id": run_id, "step": step, "checkpoint_id": checkpoint_id, "calls": [_brief(r) for r in rows]}


def _brief(row: Row) -> dict[str, Any]:
    return {k: row[k] for k in ("dispatch_id", "run_id", "step", "position", "tool_name", "kind", "concurrency_group", "sequential", "status")}


def step_bodies(conn: sa.Connection, run_id: str, ref: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of a saved step that still need a gate (a body, a child, or a recovery decision)."""
    fence.check(conn, run_id, "read saved calls")
    return [_brief(c) for c in calls_of_step(conn, ref["run_id"], ref["step"]) if c["kind"] in BODY_KINDS and c["status"] not in CALL_SETTLED]


# --- committing a step ---------------------------------------------------------------------------


def _finish(conn: sa.Connection, run_id: str, calls: Sequence[Row]) -> dict[str, Any] | None:
    finish = next((c for c in calls if c["kind"] == "finish" and c["status"] == "ok"), None)
    if finish is None:
        return None
    store.end_run(conn, run_id, "completed", output=finish["result"])
    return {"status": "completed", "output": finish["result"]}


def commit_saved_step(conn: sa.Connection, run_id: str, sid: str, ref: dict[str, Any]) -> dict[str, Any]:
    """The step commit after the bodies: one request answering every call, or a suspension."""
    run = fence.check(conn, run_id, "step commit")
    calls = calls_of_step(conn, ref["run_id"], ref["step"])
    if any(c["status"] not in CALL_SETTLED for c in calls):
        store.insert_checkpoint(conn, sid, run_id, ref["step"], "suspension")
        stop = run["stop_kind"]
        if stop is not None and ref["run_id"] == run_id:  # stopped while the step ran: stop, never suspend
            return settle_stop(conn, run, stop)
        store.end_run(conn, run_id, "suspended_client_tool")
        return {"status": "suspended_client_tool"}
    store.insert_message(conn, sid, run_id, ref["step"], "request", transcript.dump(transcript.results_message(calls)))
    store.insert_checkpoint(conn, sid, run_id, ref["step"], "step")
    return _finish(conn, run_id, calls) or {"status": "committed"}


def commit_unsaved_step(conn: sa.Connection, run_id: str, sid: str, step: int, reply: dict[str, Any], planned: list[Planned], output_required: bool) -> dict[str, Any]:
    """A step that started no body: reply, calls and answers (or the suspension) in one commit."""
    run = fence.check(conn, run_id, "step commit")
    _save_reply(conn, run_id, sid, step, reply)
    if not planned:
        if not output_required:
            store.insert_checkpoint(conn, sid, run_id, step, "step")
            text = reply_text(transcript.load_response(reply["response"]))
            store.end_run(conn, run_id, "completed", output=text)
            return {"status": "completed", "output": text}
        store.insert_message(conn, sid, run_id, step, "request", transcript.dump(transcript.text_not_allowed(TEXT_NOT_ALLOWED)))
        store.insert_checkpoint(conn, sid, run_id, step, "step")
        return {"status": "committed"}
    pending = any(p["status"] not in CALL_SETTLED for p in planned)
    kind = "suspension" if pending else "step"
    checkpoint_id = store.new_checkpoint_id()
    rows = _insert_planned(conn, run_id, sid, step, checkpoint_id, planned)
    if not pending:
        store.insert_message(conn, sid, run_id, step, "request", transcript.dump(transcript.results_message(rows)))
    store.insert_checkpoint(conn, sid, run_id, step, kind, checkpoint_id)
    if pending:
        stop = run["stop_kind"]
        if stop is not None:  # a stop came during the model request: its calls are paired, the run stops
            return settle_stop(conn, run, stop)
        store.end_run(conn, run_id, "suspended_client_tool")
        return {"status": "suspended_client_tool"}
    return _finish(conn, run_id, rows) or {"status": "committed"}


# --- ends ----------------------------------------------------------------------------------------


def fail_run(conn: sa.Connection, run_id: str, code: str, message: str) -> dict[str, Any]:
    """A failed run never leaves a call unanswered: each saved, unanswered call is paired first."""
    run = fence.check(conn, run_id, "fail")
    agent = env().agent(run["agent_name"])
    for ref in open_steps(conn, run):
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        _apply_pairings(conn, run_id, calls, _decisions(conn, agent, calls, "redirect"), "run_failed")
    store.end_run(conn, run_id, "failed", error_code=code, error=message)
    return {"status": "failed", "error_code": code, "error": message}


def stop_run(conn: sa.Connection, run_id: str, kind: str) -> dict[str, Any]:
    """The run's own workflow honours a stop record (fenced like every transaction of a run)."""
    return settle_stop(conn, fence.check(conn, run_id, "stop"), kind)


def settle_cancel(conn: sa.Connection, run_id: str) -> dict[str, Any] | None:
    """A DBOS cancel of a live run settles like ``stop(kind="abort")``, with a stop record naming it.

    None when the run is not the session's current, running run any more (nothing to settle).
    """
    reason, run = fence.why_refused(conn, run_id, None)
    if reason is not None or run is None:
        return None
    store.request_stop(conn, run["session_id"], run_id, "abort", "dbos workflow cancel")
    store.emit(conn, run["session_id"], run_id, "run_cancelled", {"run_id": run_id, "by": "dbos workflow cancel"})
    return settle_stop(conn, run, "abort")


def settle_stop(conn: sa.Connection, run: Row, kind: str) -> dict[str, Any]:
    """Finished calls keep their results; the rest are paired ``run_stopped``; the run ends."""
    run_id = run["run_id"]
    agent = env().agent(run["agent_name"])
    for ref in open_steps(conn, run):
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if all(c["status"] in CALL_SETTLED for c in calls):
            continue
        _apply_pairings(conn, run_id, calls, _decisions(conn, agent, calls, "stop"), "stop")
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        store.insert_message(conn, run["session_id"], run_id, ref["step"], "request", transcript.dump(transcript.results_message(calls)))
        store.insert_checkpoint(conn, run["session_id"], run_id, ref["step"], "step")
    status = "interrupted" if kind == "interrupt" else "failed"
    store.end_run(conn, run_id, status, error_code="run_stopped" if kind == "abort" else None, error="aborted" if kind == "abort" else None)
    return {"status": status}


# --- the attempt gate and the result write (inside a body's step) --------------------------------


def gate(conn: sa.Connection, run_id: str, dispatch_id: str, token: str | None = None, where: tuple[str, int] | None = None) -> dict[str, Any]:
    """A body's first act: decide, and if it runs, commit the attempt before the body starts.

    Two reads: the fence's (the run, its session's lock, its stop record, DBOS's cancel) and the
    call's step (the call and its siblings, which the recovery rules judge it among)."""
    run = fence.check(conn, run_id, "attempt gate")
    # the saved step the call belongs to (the workflow knows it; a delegating call's gate looks it up)
    saver = where or conn.execute(sa.select(t.calls.c.run_id, t.calls.c.step).where(t.calls.c.dispatch_id == dispatch_id)).first()
    assert saver is not None
    calls = calls_of_step(conn, saver[0], saver[1], for_update=True)
    call = next(c for c in calls if c["dispatch_id"] == dispatch_id)
    if call["status"] in CALL_SETTLED:
        return {"action": "done", "status": call["status"]}
    agent = env().agent(run["agent_name"])
    if run["stop_kind"] is not None:
        d = _decisions(conn, agent, calls, "stop")[dispatch_id]
        store.settle_call(conn, call, "run_stopped", run_id=run_id, paired_by="stop", note=d.note, reason=d.reason)
        return {"action": "done", "status": "run_stopped"}
    d = _decisions(conn, agent, calls, "recover")[dispatch_id]
    if d.action in ("run", "run_again", "reattach", "reenter"):
        _mark_proved(conn, dispatch_id, d)
        tool = agent.tool(call["tool_name"])
        transactional = tool is not None and tool.transactional
        attempt = store.start_attempt(conn, call, run_id, env().settings.executor_id, transactional=transactional, token=token)
        if d.action != "run":
            store.emit(conn, call["session_id"], run_id, "recovery",
                       {"dispatch_id": dispatch_id, "action": d.action, "reason": d.reason, "decided_by": d.decided_by})
        return {"action": d.action, "attempt": attempt, "args": call["args"], "tool_call_id": call["tool_call_id"],
                "tool_name": call["tool_name"], "session_id": call["session_id"], "child_session_id": call["child_session_id"],
                "agent_name": run["agent_name"], "transactional": transactional, "replay": call["replay"]}
    if d.action == "reconcile":
        # Ask the outside system (the body step does, outside this transaction), then gate again.
        return {"action": "reconcile", "attempts": call["attempts"], "args": call["args"], "tool_name": call["tool_name"],
                "session_id": call["session_id"], "agent_name": run["agent_name"], "reason": d.reason}
    if d.action == "pair":
        assert d.status is not None
        _mark_proved(conn, dispatch_id, d)
        store.settle_call(conn, call, d.status, run_id=run_id, paired_by="recovery", note=d.note, reason=d.reason)
        return {"action": "done", "status": d.status}
    return {"action": "done", "status": call["status"]}


def record_check(conn: sa.Connection, run_id: str, dispatch_id: str, attempts: int, verdict: dict[str, Any]) -> dict[str, Any]:
    """Commit what a reconcile check answered about the call's latest attempt, before anything acts
    on it; ``applied`` settles the call ``ok`` with the check's result in the same transaction.

    A re-executed body step then reads the verdict instead of asking again. A verdict about an
    attempt that is no longer the latest (or a call already answered) is dropped.
    """
    fence.check(conn, run_id, "reconcile verdict")
    call = store.get_call(conn, dispatch_id, for_update=True)
    assert call is not None
    if call["status"] in CALL_SETTLED or call["attempts"] != attempts:
        return {"status": call["status"], "recorded": False}
    outcome = {**verdict, "attempt": attempts, "at": store.now().isoformat()}
    store.record_check(conn, call, outcome)
    store.emit(conn, call["session_id"], run_id, "reconciled",
               {"dispatch_id": dispatch_id, "tool_name": call["tool_name"], "attempt": attempts, **verdict})
    if verdict["verdict"] == "applied":
        store.mark_decided(conn, dispatch_id, "check")
        store.close_open_attempts(conn, dispatch_id, "applied")
        store.settle_call(conn, call, "ok", run_id=run_id, paired_by="recovery", result=verdict.get("result"), reason="check: applied")
        return {"status": "ok", "recorded": True}
    return {"status": call["status"], "recorded": True}


def child_gate(conn: sa.Connection, run_id: str, dispatch_id: str, kind: str) -> tuple[dict[str, Any], Row | None, Any]:
    """The gate of a call that delegates (remote child, companion turn): the decision, and if it
    goes ahead, the call's row and its sub-agent as the code defines it now (None if removed)."""
    decided: dict[str, Any] = {**gate(conn, run_id, dispatch_id), "dispatch_id": dispatch_id, "kind": kind}
    if decided["action"] == "done":
        return decided, None, None
    call = store.get_call(conn, dispatch_id)
    parent = store.get_run(conn, run_id)
    assert call is not None and parent is not None
    return decided, call, env().agent(parent["agent_name"]).sub_agent(call["tool_name"])


def record(conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, status: str, result: Any, error: Any) -> dict[str, Any]:
    """A body's result, fenced twice: by its attempt number and by its run still owning the session.

    A refused write still closes its attempt (``refused``): attempts never stay open.
    """
    reason, _ = fence.why_refused(conn, run_id, fence.current_workflow_id())
    if reason is not None:
        store.refuse_attempt(conn, dispatch_id, attempt)
        return {"status": "refused", "written": False, "refused": f"result write refused: {reason}"}
    written = store.record_result(conn, dispatch_id, attempt, run_id, status, result=result, error=error)
    if written:
        return {"status": status, "written": True}
    call = store.get_call(conn, dispatch_id)
    assert call is not None
    return {"status": call["status"], "written": False}
