"""The recovery rules applied to ledger rows: a step's saved calls judged, and the pairings written.

``recovery/`` decides (pure); this module reads the rows it decides over and writes what it decided,
inside the caller's transaction. Entry preparation, the step commits, the attempt gate and a run's
ends all pair calls through here, so a call is answered the same way whichever of them answers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ...definitions import Agent
from ...ledger import attempts as attempt_rows
from ...ledger import calls as call_rows
from ...ledger import checkpoints as checkpoint_rows
from ...ledger.records import CallRow, CheckpointRow, RunRow
from ...ledger.statuses import CALL_SETTLED
from ...recovery import Decision, Profile, SavedCall, ToolNow, decide
from .records import CheckTarget, StepRef
from .registry import Env


def tools_now(agent: Agent) -> dict[str, ToolNow]:
    return {tool.name: ToolNow(tool.name, tool.replay, tool.accepts, tool.reconcile is not None) for tool in agent.tools}


def _check_of(row: CallRow) -> Any:
    """The check's verdict about the call's latest attempt; an answer about an older one is stale."""
    outcome = row.get("check_outcome")
    if isinstance(outcome, dict) and outcome.get("attempt") == row["attempts"]:
        return outcome.get("verdict")
    return None


def saved_call(row: CallRow) -> SavedCall:
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
        escaped=bool(row.get("tx_escaped")),
    )


def calls_of_step(conn: sa.Connection, run_id: str, step: int, *, for_update: bool = False) -> list[CallRow]:
    """The calls one run saved at one step (a run is linear, so (run, step) names one reply)."""
    return call_rows.of_step(conn, run_id, step, for_update=for_update)


def decisions(agent: Agent, profile: Profile, calls: Sequence[CallRow], entry: str, *, ask_checks: bool = True) -> dict[str, Decision]:
    """The recovery rules over one step's rows, for ``agent`` as the code defines it now under the
    runtime's recovery ``profile``. ``ask_checks=False`` where the caller pairs now, with the
    verdicts already on the rows (a redirect, a failure, a rewind): no ``reconcile`` action."""
    out = decide([saved_call(c) for c in calls], tools_now(agent), entry, profile, ask_checks)  # type: ignore[arg-type]
    return {d.dispatch_id: d for d in out}


_PROVED_OUTCOME = {"database": "rolled_back", "check": "not_applied"}


def mark_proved(conn: sa.Connection, dispatch_id: str, d: Decision) -> None:
    """Record what proved the outcome, and close the attempts it proved had no effect."""
    if d.decided_by is not None:
        call_rows.mark_decided(conn, dispatch_id, d.decided_by)
        attempt_rows.close_open_attempts(conn, dispatch_id, _PROVED_OUTCOME[d.decided_by])


def apply_pairings(conn: sa.Connection, run_id: str, calls: Sequence[CallRow], decisions: dict[str, Decision], paired_by: str) -> None:
    for call in calls:
        d = decisions[call["dispatch_id"]]
        if d.action == "pair":
            assert d.status is not None
            mark_proved(conn, call["dispatch_id"], d)  # before the settle, which closes what is left open as lost
            call_rows.settle_call(conn, call, d.status, run_id=run_id, paired_by=paired_by, note=d.note, reason=d.reason)


def step_ref(conn: sa.Connection, cp: CheckpointRow | None) -> StepRef | None:
    """The saved step a checkpoint stands at (the run that saved its calls, and the step), if any.

    A ``step`` checkpoint answered its step: nothing to recover. A suspension may be committed by a
    later run that recovered the step, so its calls are found by step among the session's active
    checkpoints, not by the run that wrote the suspension.
    """
    if cp is None or cp["kind"] == "step":
        return None
    if cp["kind"] == "append":
        return {"run_id": cp["run_id"], "step": cp["step"]}
    saver = call_rows.saver_of_active_step(conn, cp["session_id"], cp["step"])
    return {"run_id": saver or cp["run_id"], "step": cp["step"]}


def open_steps(conn: sa.Connection, run: RunRow) -> list[StepRef]:
    """Steps with unanswered calls that a failing or stopping run must answer: its own, and the
    saved step it was recovering (saved by an earlier run)."""
    refs = {(c["run_id"], c["step"]) for c in call_rows.unresolved_calls_of_run(conn, run["run_id"])}
    latest = step_ref(conn, checkpoint_rows.latest_checkpoint(conn, run["session_id"]))
    if latest is not None:
        refs.add((latest["run_id"], latest["step"]))
    return [{"run_id": r, "step": s} for r, s in sorted(refs, key=lambda ref: ref[1])]


def checks_to_ask(conn: sa.Connection, env: Env, run: RunRow, steps: list[StepRef], entry: str) -> list[CheckTarget]:
    """The started calls of ``steps`` whose pairing under ``entry`` waits for a reconcile check
    (no verdict yet about their latest attempt), as ``ask_and_record`` requests."""
    agent = env.agent(run["agent_name"])
    wanted: list[CheckTarget] = []
    for ref in steps:
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if all(c["status"] in CALL_SETTLED for c in calls):
            continue
        decided = decisions(agent, env.profile, calls, entry)
        for c in calls:
            if decided[c["dispatch_id"]].action == "reconcile":
                wanted.append({"dispatch_id": c["dispatch_id"], "attempts": c["attempts"], "args": c["args"], "tool_name": c["tool_name"],
                               "session_id": c["session_id"], "agent_name": run["agent_name"]})
    return wanted
