"""A step's durable boundaries and a run's ends, each one ledger transaction (``durable.tx``).

The entry first (``prepare_entry``): the run's first transaction applies its entry to the ledger.
A rewind supersedes what followed its checkpoint (and pairs the calls left behind there), a
redirect pairs the saved step's unanswered calls and states the new message, a resume or retry
hands the saved step to the workflow to recover; the plan says where the run starts.

Before a redirect's transaction, the workflow asks the reconcile checks of the saved step's started
calls (``redirect_checks`` lists them; ``reconcile.ask_before`` asks and records), so the pairing
answers what a check can tell instead of ``outcome_unknown``.

Save first (``append_checkpoint``: the reply and every call with a fresh dispatch id, before any
body), then the step commit (one request answering every call, or a suspension); a step that starts
no body saves and commits in one. A run's ends (fail, stop, a DBOS cancel) never leave a call
unanswered: each saved, unanswered call is paired first.

What a transaction judges calls by (the agents as the code defines them now, the recovery
profile, the executor id) is handed in: the run workflow's ``Env``, or a front end's own agents
and profile (``settle_cancel``, ``settle_stop``); nothing here looks the launched runtime up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from ...definitions import Agent
from ...ledger import calls as call_rows
from ...ledger import step_rows
from ...ledger.calls import insert_calls, record_check, reopen_call
from ...ledger.checkpoints import (
    checkpoint_event,
    get_checkpoint,
    insert_checkpoint,
    latest_checkpoint,
    new_checkpoint_id,
    next_step,
    rewind_to,
)
from ...ledger.events import emit
from ...ledger.messages import insert_message
from ...ledger.names import PREPARE_TX
from ...ledger.records import RunRow
from ...ledger.rows import new_id
from ...ledger.runs import end_run, start_queued_run
from ...ledger.statuses import BODY_KINDS, CALL_SETTLED, REDIRECTING_ENTRIES, RunStatus
from ...ledger.stops import request_stop
from ...recovery import Profile
from . import durable, fence, transcript
from .pairing import (
    apply_pairings,
    calls_of_step,
    checks_to_ask,
    decisions,
    open_steps,
    saved_call,
    step_ref,
)
from .records import (
    Appended,
    CallBrief,
    CheckTarget,
    EntryPlan,
    ModelReply,
    NewCallRow,
    PlannedCall,
    StepOutcome,
    StepRef,
)
from .registry import Env, agent_named

TEXT_NOT_ALLOWED = "Plain text responses are not permitted, please include your response in a tool call"


# --- the entry --------------------------------------------------------------------------------


def _pair_left_behind(conn: sa.Connection, run_id: str, agent: Agent, profile: Profile) -> None:
    """Answer every unanswered call of the branch a rewind just superseded, in the rewind's transaction.

    No run will ever reach those calls again (entries and answers follow the active branch), so a
    pending approval or client call there would stay ``pending`` for ever, listed as waiting and
    refused when answered. They are paired as a redirect pairs them (``not_started`` if no body ever
    started, else ``outcome_unknown``; a client call ``outcome_unknown``), by the pure recovery function.
    """
    steps = call_rows.unanswered_steps_superseded_by(conn, run_id)
    for saver, step in sorted(steps, key=lambda ref: (ref[1], ref[0])):
        calls = calls_of_step(conn, saver, step)
        # a superseded branch asks no check: no run or model reaches it again
        apply_pairings(conn, run_id, calls, decisions(agent, profile, calls, "redirect", ask_checks=False), "rewind")



def redirect_checks(conn: sa.Connection, env: Env, run_id: str) -> list[CheckTarget]:
    """The reconcile checks a redirecting entry asks before its pairing (a fenced read).

    Its target is the step ``prepare_entry`` will pair: the rewind's checkpoint or the latest one.
    Once the prepare transaction has committed (a replay of the workflow), there is nothing to ask:
    the calls are answered, and the latest checkpoint is already this run's own.
    """
    run = fence.check(conn, run_id, "read saved calls", admit_queued=True)
    if run["entry"] not in REDIRECTING_ENTRIES or durable.tx_committed(conn, run_id, PREPARE_TX):
        return []
    target = get_checkpoint(conn, run["checkpoint_id"]) if run["checkpoint_id"] else latest_checkpoint(conn, run["session_id"])
    ref = step_ref(conn, target)
    return [] if ref is None else checks_to_ask(conn, env, run, [ref], "redirect")


def prepare_entry(conn: sa.Connection, env: Env, run_id: str) -> EntryPlan:
    """Apply the entry to the ledger and say where the run starts: at the model, or recovering a step."""
    run = fence.check(conn, run_id, "prepare", admit_queued=True)
    if run["status"] == "queued":  # a worker dequeued it: from here on it runs, on this executor
        start_queued_run(conn, run_id, run["session_id"], env.settings.executor_id)
    sid, entry, agent = run["session_id"], run["entry"], env.agent(run["agent_name"])
    target = latest_checkpoint(conn, sid)
    if run["checkpoint_id"]:
        target = get_checkpoint(conn, run["checkpoint_id"])
        assert target is not None
        rewind_to(conn, target, run_id)
        _pair_left_behind(conn, run_id, agent, env.profile)
    emit(conn, sid, run_id, "run_status", {"status": "running", "entry": entry})
    ref = step_ref(conn, target)

    if entry in REDIRECTING_ENTRIES:
        if ref is not None:
            calls = calls_of_step(conn, ref["run_id"], ref["step"])
            # the checks were asked just before this transaction (``redirect_checks``): pair by their verdicts
            apply_pairings(conn, run_id, calls, decisions(agent, env.profile, calls, "redirect", ask_checks=False), "redirect")
            calls = calls_of_step(conn, ref["run_id"], ref["step"])
            body = transcript.dump(transcript.results_message(calls, run["entry_message"]))
            insert_message(conn, sid, run_id, ref["step"], "request", body)
            insert_checkpoint(conn, sid, run_id, ref["step"], "step")
        elif run["entry_message"] is not None:
            insert_message(conn, sid, run_id, None, "request", transcript.dump(transcript.user_message(run["entry_message"])))
    elif entry == "start":
        if run["entry_message"] is not None:
            insert_message(conn, sid, run_id, None, "request", transcript.dump(transcript.user_message(run["entry_message"])))
    elif ref is not None:  # resume_continue, resume_from_checkpoint, retry: recover the saved step
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if entry == "retry":
            decided = decisions(agent, env.profile, calls, "retry")
            for call in calls:
                if call["status"] in CALL_SETTLED and decided[call["dispatch_id"]].action != "keep":
                    reopen_call(conn, call)
                    if saved_call(call).check == "unknown":
                        # the failure asked and the check could not tell: retry() asks it again (the
                        # verdict stays in the session's events, as ``reconciled``)
                        record_check(conn, call, None)
                    emit(conn, sid, run_id, "call_reopened", {"dispatch_id": call["dispatch_id"]})
        return EntryPlan(sid, run["agent_name"], entry, run["max_steps"], "recover", ref, ref["step"] + 1)
    return EntryPlan(sid, run["agent_name"], entry, run["max_steps"], "model", None, next_step(conn, sid))


# --- a step -------------------------------------------------------------------------------------


Events = list[tuple[str, Mapping[str, Any]]]


def _planned_rows(run_id: str, sid: str, step: int, checkpoint_id: str, planned: Sequence[PlannedCall]) -> list[NewCallRow]:
    """A fresh dispatch id per call, for the save-first record."""
    rows: list[NewCallRow] = []
    for p in planned:
        rows.append(
            {
                "dispatch_id": new_id(),
                "session_id": sid,
                "run_id": run_id,
                "checkpoint_id": checkpoint_id,
                "step": step,
                "position": p.position,
                "tool_call_id": p.tool_call_id,
                "tool_name": p.tool_name,
                "kind": p.kind,
                "args": p.args,
                "replay": p.replay,
                "concurrency_group": p.concurrency_group,
                "sequential": p.sequential,
                "requires_approval": p.requires_approval,
                "transactional": p.transactional,
                "status": p.status,
                "result": p.result,
                "error": p.error,
                "paired_by": p.paired_by,
                "settled_run_id": run_id if p.status in CALL_SETTLED else None,
            }
        )
    return rows


def _call_events(rows: Sequence[Mapping[str, Any]]) -> Events:
    return [
        ("approval_requested" if r["requires_approval"] else ("client_call" if r["kind"] == "client" else "call_saved"),
         {k: r[k] for k in ("dispatch_id", "tool_name", "kind", "args", "status", "position")})
        for r in rows
    ]


def _reply_events(step: int, reply: ModelReply) -> Events:
    text = transcript.reply_text(transcript.load_response(reply.response))
    events: Events = [("model_text", {"step": step, "text": text})] if text else []
    # the checks the step ran (an SDK's guardrails) and passed, shown with the reply they came with
    return events + [("guardrail", {"step": step, **check}) for check in reply.checks]


def _reply_rows(run_id: str, sid: str, step: int, reply: ModelReply, *after: tuple[str, Any], checkpoint: tuple[str, str]) -> step_rows.StepRows:
    """The reply as the step's first message (and any ``after`` it), its usage, the checkpoint."""
    return step_rows.StepRows(
        sid, run_id, step, messages=[("response", reply.response), *after], usage=(reply.model_name, reply.usage), checkpoint=checkpoint
    )


def append_checkpoint(conn: sa.Connection, run_id: str, sid: str, step: int, reply: ModelReply, planned: Sequence[PlannedCall]) -> Appended:
    """Save first: the reply and every call (arguments, policy now, fresh dispatch id) before any body."""
    fence.check(conn, run_id, "append")
    checkpoint_id = new_checkpoint_id()
    rows = _planned_rows(run_id, sid, step, checkpoint_id, planned)
    insert_calls(conn, rows)
    events = [*_reply_events(step, reply), *_call_events(rows), checkpoint_event(checkpoint_id, "append", step)]
    step_rows.write(conn, _reply_rows(run_id, sid, step, reply, checkpoint=(checkpoint_id, "append")), events)
    return {"run_id": run_id, "step": step, "checkpoint_id": checkpoint_id, "calls": [brief(r) for r in rows]}


def brief(row: Mapping[str, Any]) -> CallBrief:
    return cast(CallBrief, {k: row[k] for k in ("dispatch_id", "run_id", "step", "position", "tool_name", "kind", "concurrency_group", "sequential", "status")})


def calls_to_gate(conn: sa.Connection, run_id: str, ref: StepRef) -> list[CallBrief]:
    """The calls of a saved step that still need a gate (a body, a child, or a recovery decision)."""
    fence.check(conn, run_id, "read saved calls")
    return [brief(c) for c in calls_of_step(conn, ref["run_id"], ref["step"]) if c["kind"] in BODY_KINDS and c["status"] not in CALL_SETTLED]


# --- committing a step ---------------------------------------------------------------------------
#
# A commit gathers its rows and its events, ends the run if it does (``end_run`` adds its event to
# the list), and writes the rows and the events last, in one statement on Postgres (``step_rows``).
# Anything that writes events of its own (``settle_stop``) comes after.


def _finish(conn: sa.Connection, run_id: str, calls: Sequence[Mapping[str, Any]], events: Events, stop: str | None) -> StepOutcome | None:
    """The run's completion by its finish call, unless a stop came while the step ran (None: the
    run goes on, or ``_stop_at_commit`` ends it)."""
    finish = next((c for c in calls if c["kind"] == "finish" and c["status"] == "ok"), None)
    if finish is None or stop is not None:
        return None
    end_run(conn, run_id, "completed", output=finish["result"], events=events)
    return StepOutcome("completed", output=finish["result"])


def _stop_at_commit(conn: sa.Connection, env: Env, run_id: str, stop: str | None) -> StepOutcome | None:
    """A stop recorded while the step ran is honoured at its commit, after the step's rows are
    written (the reply was paid for and every result is kept): the run ends stopped, never
    completed by a reply or a finish call that arrived after the stop (the same rule as a DBOS
    cancel, which ``fence.check`` raises at this commit)."""
    return None if stop is None else _settle_stop_of(conn, env, run_id, stop)


def _settle_stop_of(conn: sa.Connection, env: Env, run_id: str, stop: str) -> StepOutcome:
    run = fence.check(conn, run_id, "stop")
    return settle_stop(conn, run, stop, env.agent(run["agent_name"]), env.profile)


def _suspend_or_stop(conn: sa.Connection, env: Env, run_id: str, rows: step_rows.StepRows, events: Events, stop: str | None) -> StepOutcome:
    """A step left with a pending call: the run suspends, unless a stop came while it ran (its calls
    are paired, the run stops: never a suspension)."""
    if stop is not None:
        step_rows.write(conn, rows, events)
        return _settle_stop_of(conn, env, run_id, stop)
    end_run(conn, run_id, "suspended_client_tool", events=events)
    step_rows.write(conn, rows, events)
    return StepOutcome("suspended_client_tool")


def commit_after_bodies(conn: sa.Connection, env: Env, run_id: str, sid: str, ref: StepRef) -> StepOutcome:
    """The step commit after the bodies: one request answering every call, or a suspension.

    The fence and the step's calls are one read, or the full fence and then the calls when it
    would refuse (``fence.step_calls``)."""
    head, calls = fence.step_calls(conn, run_id, ref["run_id"], ref["step"], "step commit")
    checkpoint_id = new_checkpoint_id()
    if any(c["status"] not in CALL_SETTLED for c in calls):
        rows = step_rows.StepRows(sid, run_id, ref["step"], checkpoint=(checkpoint_id, "suspension"))
        own = ref["run_id"] == run_id  # a recovered step of an earlier run suspends this one
        return _suspend_or_stop(conn, env, run_id, rows, [checkpoint_event(checkpoint_id, "suspension", ref["step"])], head["stop_kind"] if own else None)
    answers = ("request", transcript.dump(transcript.results_message(calls)))
    events: Events = [checkpoint_event(checkpoint_id, "step", ref["step"])]
    stop = head["stop_kind"] if ref["run_id"] == run_id else None
    outcome = _finish(conn, run_id, calls, events, stop)
    step_rows.write(conn, step_rows.StepRows(sid, run_id, ref["step"], messages=[answers], checkpoint=(checkpoint_id, "step")), events)
    return outcome or _stop_at_commit(conn, env, run_id, stop) or StepOutcome("committed")


def commit_without_bodies(conn: sa.Connection, env: Env, run_id: str, sid: str, step: int, reply: ModelReply, planned: Sequence[PlannedCall], output_required: bool) -> StepOutcome:
    """A step that started no body: reply, calls and answers (or the suspension) in one commit."""
    run = fence.check(conn, run_id, "step commit")
    checkpoint_id = new_checkpoint_id()
    events = _reply_events(step, reply)
    if not planned:
        if not output_required:
            events.append(checkpoint_event(checkpoint_id, "step", step))
            text = transcript.reply_text(transcript.load_response(reply.response))
            if run["stop_kind"] is None:
                end_run(conn, run_id, "completed", output=text, events=events)
            step_rows.write(conn, _reply_rows(run_id, sid, step, reply, checkpoint=(checkpoint_id, "step")), events)
            return _stop_at_commit(conn, env, run_id, run["stop_kind"]) or StepOutcome("completed", output=text)
        retry = ("request", transcript.dump(transcript.text_not_allowed(TEXT_NOT_ALLOWED)))
        events.append(checkpoint_event(checkpoint_id, "step", step))
        step_rows.write(conn, _reply_rows(run_id, sid, step, reply, retry, checkpoint=(checkpoint_id, "step")), events)
        return StepOutcome("committed")
    pending = any(p.status not in CALL_SETTLED for p in planned)
    kind = "suspension" if pending else "step"
    calls = _planned_rows(run_id, sid, step, checkpoint_id, planned)
    insert_calls(conn, calls)
    answers = [] if pending else [("request", transcript.dump(transcript.results_message(calls)))]
    rows = _reply_rows(run_id, sid, step, reply, *answers, checkpoint=(checkpoint_id, kind))
    events += [*_call_events(calls), checkpoint_event(checkpoint_id, kind, step)]
    if pending:  # a stop that came during the model request: its calls are paired, the run stops
        return _suspend_or_stop(conn, env, run_id, rows, events, run["stop_kind"])
    outcome = _finish(conn, run_id, calls, events, run["stop_kind"])
    step_rows.write(conn, rows, events)
    return outcome or _stop_at_commit(conn, env, run_id, run["stop_kind"]) or StepOutcome("committed")


# --- ends ----------------------------------------------------------------------------------------


def failure_checks(conn: sa.Connection, env: Env, run_id: str) -> list[CheckTarget]:
    """The reconcile checks a failing run asks before ``fail_run`` pairs its calls (a fenced read)."""
    run = fence.check(conn, run_id, "read saved calls")
    return checks_to_ask(conn, env, run, open_steps(conn, run), "redirect")


def fail_run(conn: sa.Connection, env: Env, run_id: str, code: str, message: str) -> StepOutcome:
    """A failed run never leaves a call unanswered: each saved, unanswered call is paired first,
    by the redirect rules and the verdicts the checks asked just before (``failure_checks``) gave."""
    run = fence.check(conn, run_id, "fail")
    agent = env.agent(run["agent_name"])
    for ref in open_steps(conn, run):
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        apply_pairings(conn, run_id, calls, decisions(agent, env.profile, calls, "redirect", ask_checks=False), "run_failed")
    end_run(conn, run_id, "failed", error_code=code, error=message)
    return StepOutcome("failed", error_code=code, error=message)


def stop_run(conn: sa.Connection, env: Env, run_id: str, kind: str) -> StepOutcome:
    """The run's own workflow honours a stop record (fenced like every transaction of a run)."""
    run = fence.check(conn, run_id, "stop")
    return settle_stop(conn, run, kind, env.agent(run["agent_name"]), env.profile)


def settle_cancel(conn: sa.Connection, run_id: str, agents: Mapping[str, Agent], profile: Profile) -> StepOutcome | None:
    """A DBOS cancel of a live run settles like ``stop(kind="abort")``, with a stop record naming it.

    ``agents`` and ``profile``: the caller's (the run's workflow, or a front end settling a cancel it
    found), what the stop's pairing judges the calls by.

    None when the run is not the session's current, running (or still queued) run any more
    (nothing to settle). A queued run cancelled on its queue is never dequeued, so this is its only
    end: like a stop that withdraws it (``entries.stop``), it ends without having applied its entry.
    """
    run = fence.live_run(conn, run_id)
    if run is None:
        return None
    request_stop(conn, run["session_id"], run_id, "abort", "dbos workflow cancel")
    emit(conn, run["session_id"], run_id, "run_cancelled", {"run_id": run_id, "by": "dbos workflow cancel"})
    if run["status"] == "queued":
        end_run(conn, run_id, "failed", error_code="run_stopped", error="cancelled while queued (dbos workflow cancel): no worker ran it")
        return StepOutcome("failed")
    return settle_stop(conn, run, "abort", agent_named(agents, run["agent_name"]), profile)


def settle_stop(conn: sa.Connection, run: RunRow, kind: str, agent: Agent, profile: Profile) -> StepOutcome:
    """Finished calls keep their results; the rest are paired ``run_stopped``; the run ends.

    Every open step is answered, also one whose calls all finished before the stop was honoured
    (a DBOS cancel that committed mid-body refuses the step commit after it): its saved reply
    still needs the request answering it, or the transcript would hold calls nobody answered.
    ``agent`` (the run's, as the code defines it now) and ``profile``: the caller's (a workflow's
    ``Env``, or a front end stopping a suspended run with its own agents)."""
    run_id = run["run_id"]
    for ref in open_steps(conn, run):
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if not calls:
            continue
        if any(c["status"] not in CALL_SETTLED for c in calls):
            apply_pairings(conn, run_id, calls, decisions(agent, profile, calls, "stop"), "stop")
            calls = calls_of_step(conn, ref["run_id"], ref["step"])
        insert_message(conn, run["session_id"], run_id, ref["step"], "request", transcript.dump(transcript.results_message(calls)))
        insert_checkpoint(conn, run["session_id"], run_id, ref["step"], "step")
    status: RunStatus = "interrupted" if kind == "interrupt" else "failed"
    end_run(conn, run_id, status, error_code="run_stopped" if kind == "abort" else None, error="aborted" if kind == "abort" else None)
    return StepOutcome(status)
