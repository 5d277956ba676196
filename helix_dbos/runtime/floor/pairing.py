"""The recovery rules applied to ledger rows: a step's saved calls judged, and the pairings written.

``recovery/`` decides (pure); this module reads the rows it decides over and writes what it decided,
inside the caller's transaction. Entry preparation, the step commits, the attempt gate and a run's
ends all pair calls through here, so a call is answered the same way whichever of them answers it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa

from ...definitions import Agent
from ...ledger import store
from ...ledger import tables as t
from ...ledger.records import CallRow, CheckpointRow, RunRow
from ...ledger.statuses import CALL_SETTLED
from ...recovery import Decision, SavedCall, ToolNow, decide
from . import fence
from .records import CheckTarget, StepRef
from .registry import env


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
    )


def calls_of_step(conn: sa.Connection, run_id: str, step: int, *, for_update: bool = False) -> list[CallRow]:
    """The calls one run saved at one step (a run is linear, so (run, step) names one reply)."""
    return cast("list[CallRow]", store.fetch_all(conn, _step_calls(for_update and conn.dialect.name == "postgresql"), {"w_run_id": run_id, "w_step": step}))


@functools.cache
def _step_calls(for_update: bool) -> sa.Select[Any]:
    stmt = sa.select(t.calls).where(t.calls.c.run_id == sa.bindparam("w_run_id"), t.calls.c.step == sa.bindparam("w_step")).order_by(t.calls.c.position)
    return stmt.with_for_update() if for_update else stmt


def fenced_calls_of_step(conn: sa.Connection, run_id: str, saver: str, step: int, *, for_update: bool = False) -> tuple[dict[str, Any] | None, list[CallRow]]:
    """The fence for ``run_id`` and the calls ``saver`` saved at ``step``, in one statement: the
    fence's conditions beside the calls (SQLite, under the database's one write lock), or its
    locked CTE joined to them (Postgres, ``fence.locked_head``, the session row locked first).

    Returns the run's ``agent_name`` and ``stop_kind`` when the fence let this workflow through,
    else None: the caller takes ``fence.check`` (which says why, and raises) and reads the calls
    itself. A step with no calls also returns None (there is nothing to read the fence beside)."""
    if fence.current_workflow_id() not in (None, run_id):
        return None, []
    sqlite = conn.dialect.name == "sqlite"
    stmt = _fenced_calls_sqlite() if sqlite else _fenced_calls_pg(for_update)
    rows = [dict(r) for r in conn.execute(stmt, {"w_run_id": run_id, "w_saver": saver, "w_step": step}).mappings()]
    if not rows or not fence.head_passes(rows[0], run_id):
        return None, []
    head = {"agent_name": rows[0]["fence_agent"], "stop_kind": rows[0]["fence_stop"]}
    for r in rows:
        for k in _FENCE_KEYS:
            del r[k]
    return head, cast("list[CallRow]", rows)


_FENCE_KEYS = (*fence.FENCE_HEAD_KEYS, "fence_agent")


@functools.cache
def _fenced_calls_sqlite() -> sa.Select[Any]:
    run_id: sa.BindParameter[str] = sa.bindparam("w_run_id")
    session = sa.select(t.runs.c.session_id).where(t.runs.c.run_id == run_id).scalar_subquery()
    return (
        sa.select(
            t.calls,
            *fence.head_columns(run_id, session, sqlite=True),
            sa.select(t.runs.c.agent_name).where(t.runs.c.run_id == run_id).scalar_subquery().label("fence_agent"),
        )
        .where(t.calls.c.run_id == sa.bindparam("w_saver"), t.calls.c.step == sa.bindparam("w_step"))
        .order_by(t.calls.c.position)
    )


@functools.cache
def _fenced_calls_pg(for_update: bool) -> sa.Select[Any]:
    head = fence.locked_head(sa.bindparam("w_run_id"))
    stmt = (
        sa.select(t.calls, *(head.c[k] for k in _FENCE_KEYS))
        .select_from(t.calls.join(head, sa.true()))
        .where(t.calls.c.run_id == sa.bindparam("w_saver"), t.calls.c.step == sa.bindparam("w_step"))
        .order_by(t.calls.c.position)
    )
    return stmt.with_for_update(of=t.calls) if for_update else stmt


def decisions(agent: Agent, calls: Sequence[CallRow], entry: str, *, ask_checks: bool = True) -> dict[str, Decision]:
    """The recovery rules over one step's rows. ``ask_checks=False`` where the caller pairs now,
    with the verdicts already on the rows (a redirect, a failure, a rewind): no ``reconcile`` action."""
    out = decide([saved_call(c) for c in calls], tools_now(agent), entry, env().profile, ask_checks)  # type: ignore[arg-type]
    return {d.dispatch_id: d for d in out}


_PROVED_OUTCOME = {"database": "rolled_back", "check": "not_applied"}


def mark_proved(conn: sa.Connection, dispatch_id: str, d: Decision) -> None:
    """Record what proved the outcome, and close the attempts it proved had no effect."""
    if d.decided_by is not None:
        store.mark_decided(conn, dispatch_id, d.decided_by)
        store.close_open_attempts(conn, dispatch_id, _PROVED_OUTCOME[d.decided_by])


def apply_pairings(conn: sa.Connection, run_id: str, calls: Sequence[CallRow], decisions: dict[str, Decision], paired_by: str) -> None:
    for call in calls:
        d = decisions[call["dispatch_id"]]
        if d.action == "pair":
            assert d.status is not None
            mark_proved(conn, call["dispatch_id"], d)  # before the settle, which closes what is left open as lost
            store.settle_call(conn, call, d.status, run_id=run_id, paired_by=paired_by, note=d.note, reason=d.reason)


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
    active = sa.select(t.checkpoints.c.checkpoint_id).where(
        t.checkpoints.c.session_id == cp["session_id"], t.checkpoints.c.superseded_by.is_(None)
    )
    saver = conn.execute(
        sa.select(t.calls.c.run_id)
        .where(t.calls.c.session_id == cp["session_id"], t.calls.c.step == cp["step"], t.calls.c.checkpoint_id.in_(active))
        .limit(1)
    ).scalar()
    return {"run_id": saver or cp["run_id"], "step": cp["step"]}


def open_steps(conn: sa.Connection, run: RunRow) -> list[StepRef]:
    """Steps with unanswered calls that a failing or stopping run must answer: its own, and the
    saved step it was recovering (saved by an earlier run)."""
    refs = {(c["run_id"], c["step"]) for c in store.unresolved_calls_of_run(conn, run["run_id"])}
    latest = step_ref(conn, store.latest_checkpoint(conn, run["session_id"]))
    if latest is not None:
        refs.add((latest["run_id"], latest["step"]))
    return [{"run_id": r, "step": s} for r, s in sorted(refs, key=lambda ref: ref[1])]


def checks_to_ask(conn: sa.Connection, run: RunRow, steps: list[StepRef], entry: str) -> list[CheckTarget]:
    """The started calls of ``steps`` whose pairing under ``entry`` waits for a reconcile check
    (no verdict yet about their latest attempt), as ``ask_and_record`` requests."""
    agent = env().agent(run["agent_name"])
    wanted: list[CheckTarget] = []
    for ref in steps:
        calls = calls_of_step(conn, ref["run_id"], ref["step"])
        if all(c["status"] in CALL_SETTLED for c in calls):
            continue
        decided = decisions(agent, calls, entry)
        for c in calls:
            if decided[c["dispatch_id"]].action == "reconcile":
                wanted.append({"dispatch_id": c["dispatch_id"], "attempts": c["attempts"], "args": c["args"], "tool_name": c["tool_name"],
                               "session_id": c["session_id"], "agent_name": run["agent_name"]})
    return wanted
