"""What callers get back: run results, handles and read-only views of a session, all read from the ledger."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ..errors import RunFailedError, RunNotFoundError, SessionNotFoundError
from ..ledger import store
from ..ledger import tables as t
from ..ledger.statuses import RUN_AT_REST, awaits_answer
from . import transcript
from .store_retry import retrying_sync


@dataclass(frozen=True)
class PendingCall:
    """A call the run is suspended on; answer it with ``approve`` or ``submit_tool_result``."""

    dispatch_id: str
    tool_name: str
    kind: str  # "approval" or "client"
    args: Any
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Usage:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class RunResult:
    status: str
    output: Any
    session_id: str
    run_id: str
    pending: list[PendingCall] = field(default_factory=list)
    error: str | None = None
    error_code: str | None = None
    usage: Usage = field(default_factory=Usage)

    def raise_for_status(self) -> RunResult:
        if self.status == "failed":
            raise RunFailedError(f"run {self.run_id} failed: {self.error_code}", detail=self.error)
        return self


@dataclass(frozen=True)
class CallView:
    dispatch_id: str
    tool_name: str
    kind: str
    args: Any
    status: str
    attempts: list[dict[str, Any]]
    result: Any
    error: Any
    replay: str
    step: int
    position: int
    run_id: str
    note: str | None
    tool_call_id: str | None
    approved: bool | None = None
    approval_actor: str | None = None
    child_session_id: str | None = None
    #: "database" or "check" when recovery, not the body, proved the outcome (see docs/writing-tools.md).
    decided_by: str | None = None
    #: What the tool's reconcile check last answered: {"verdict", "attempt", "result" | "reason", "at"}.
    check_outcome: dict[str, Any] | None = None


@dataclass(frozen=True)
class SessionView:
    session_id: str
    agent_name: str
    status: str
    current_run_id: str | None
    messages: list[Any]  # pydantic-ai ModelMessage, the active transcript
    runs: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    calls: list[CallView]

    def call(self, dispatch_id: str) -> CallView:
        return next(c for c in self.calls if c.dispatch_id == dispatch_id)

    def calls_named(self, tool_name: str) -> list[CallView]:
        return [c for c in self.calls if c.tool_name == tool_name]


def pending_calls(conn: sa.Connection, run: dict[str, Any]) -> list[PendingCall]:
    """What a suspended run waits for; nothing once a later run took its session over (a rewind,
    a new turn, the continuation after the answers): that run's waits are its own."""
    if run["status"] != "suspended_client_tool":
        return []
    session = store.get_session(conn, run["session_id"])
    if session is None or session["current_run_id"] != run["run_id"]:
        return []
    rows = store.fetch_all(
        conn,
        sa.select(t.calls)
        .where(t.calls.c.session_id == run["session_id"], t.calls.c.status == "pending")
        .order_by(t.calls.c.step, t.calls.c.position),
    )
    return [
        PendingCall(r["dispatch_id"], r["tool_name"], "client" if r["kind"] == "client" else "approval", r["args"], r["tool_call_id"])
        for r in rows
        if awaits_answer(r["kind"], r["requires_approval"], r["approved"])
    ]


def run_usage(conn: sa.Connection, run_id: str) -> Usage:
    row = conn.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(t.usage.c.input_tokens), 0), sa.func.coalesce(sa.func.sum(t.usage.c.output_tokens), 0)).where(
            t.usage.c.run_id == run_id
        )
    ).one()
    return Usage(int(row[0]), int(row[1]), int(row[2]))


def read_result(conn: sa.Connection, run_id: str) -> RunResult:
    run = store.get_run(conn, run_id)
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    return RunResult(
        status=run["status"],
        output=run["output"],
        session_id=run["session_id"],
        run_id=run_id,
        pending=pending_calls(conn, run),
        error=run["error"],
        error_code=run["error_code"],
        usage=run_usage(conn, run_id),
    )


def read_session(conn: sa.Connection, session_id: str) -> SessionView:
    session = store.get_session(conn, session_id)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    calls = store.list_calls(conn, session_id=session_id, limit=100_000)
    attempts = store.attempts_of(conn, [c["dispatch_id"] for c in calls])
    return SessionView(
        session_id=session_id,
        agent_name=session["agent_name"],
        status=session["status"],
        current_run_id=session["current_run_id"],
        messages=transcript.load([m["body"] for m in store.active_messages(conn, session_id)]),
        runs=store.list_runs(conn, session_id),
        checkpoints=store.list_checkpoints(conn, session_id),
        calls=[
            CallView(
                dispatch_id=c["dispatch_id"],
                tool_name=c["tool_name"],
                kind=c["kind"],
                args=c["args"],
                status=c["status"],
                attempts=attempts[c["dispatch_id"]],
                result=c["result"],
                error=c["error"],
                replay=c["replay"],
                step=c["step"],
                position=c["position"],
                run_id=c["run_id"],
                note=c["outcome_note"],
                tool_call_id=c["tool_call_id"],
                approved=c["approved"],
                approval_actor=c["approval_actor"],
                child_session_id=c["child_session_id"],
                decided_by=c["decided_by"],
                check_outcome=c["check_outcome"],
            )
            for c in calls
        ],
    )


def poll(check: Callable[[], Any], timeout: float | None, what: str, store_retry_window: float | None = None) -> Any:
    """Poll ``check`` until it returns non-None; short at first, so a fast run returns fast.

    With ``store_retry_window``, a database outage does not end the wait: the run being waited for
    rides it out too (or fails ``store_unavailable`` once the store is back), so transient errors
    are retried until ``timeout``, or for the window when the wait has no timeout.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.005
    while True:
        if store_retry_window is None:
            value = check()
        else:
            window = store_retry_window if deadline is None else max(deadline - time.monotonic(), 0.0)
            value = retrying_sync(f"waiting for {what}", check, window)
        if value is not None:
            return value
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def at_rest(conn: sa.Connection, run_id: str) -> RunResult | None:
    run = store.get_run(conn, run_id)
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    return read_result(conn, run_id) if run["status"] in RUN_AT_REST else None
