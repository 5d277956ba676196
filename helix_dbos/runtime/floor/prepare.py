"""Entry preparation: the first transaction of a run applies its entry to the ledger.

A rewind supersedes what followed its checkpoint (and pairs the calls left behind there), a
redirect pairs the saved step's unanswered calls and states the new message, a resume or retry
hands the saved step to the workflow to recover; the plan says where the run starts.

Before a redirect's transaction, the workflow asks the reconcile checks of the saved step's started
calls (``redirect_checks`` lists them; ``reconcile.ask_before`` asks and records), so the pairing
answers what a check can tell instead of ``outcome_unknown``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ...definitions import Agent
from ...ledger import store
from ...ledger import tables as t
from ...ledger.statuses import CALL_SETTLED, REDIRECTING_ENTRIES
from ..flow import reconcile
from . import durable, fence, transcript
from .pairing import apply_pairings, calls_of_step, decisions, saved_call, step_ref
from .records import CheckTarget
from .state import env


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
        # a superseded branch asks no check: no run or model reaches it again
        apply_pairings(conn, run_id, calls, decisions(agent, calls, "redirect", ask_checks=False), "rewind")


PREPARE_TX = "helix.prepare"


def redirect_checks(conn: sa.Connection, run_id: str) -> list[CheckTarget]:
    """The reconcile checks a redirecting entry asks before its pairing (a fenced read).

    Its target is the step ``prepare_entry`` will pair: the rewind's checkpoint or the latest one.
    Once the prepare transaction has committed (a replay of the workflow), there is nothing to ask:
    the calls are answered, and the latest checkpoint is already this run's own.
    """
    run = fence.check(conn, run_id, "read saved calls")
    if run["entry"] not in REDIRECTING_ENTRIES or durable.tx_committed(conn, run_id, PREPARE_TX):
        return []
    target = store.get_checkpoint(conn, run["checkpoint_id"]) if run["checkpoint_id"] else store.latest_checkpoint(conn, run["session_id"])
    ref = step_ref(conn, target)
    return [] if ref is None else reconcile.checks_to_ask(conn, run, [ref], "redirect")


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
            # the checks were asked just before this transaction (``redirect_checks``): pair by their verdicts
            apply_pairings(conn, run_id, calls, decisions(agent, calls, "redirect", ask_checks=False), "redirect")
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
            decided = decisions(agent, calls, "retry")
            for call in calls:
                if call["status"] in CALL_SETTLED and decided[call["dispatch_id"]].action != "keep":
                    store.reopen_call(conn, call)
                    if saved_call(call).check == "unknown":
                        # the failure asked and the check could not tell: retry() asks it again (the
                        # verdict stays in the session's events, as ``reconciled``)
                        store.record_check(conn, call, None)
                    store.emit(conn, sid, run_id, "call_reopened", {"dispatch_id": call["dispatch_id"]})
        plan["mode"] = "recover"
        plan["recover"] = ref
    plan["step"] = ref["step"] + 1 if plan["mode"] == "recover" and ref else store.next_step(conn, sid)
    return plan
