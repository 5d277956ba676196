"""Remote sub-agents: the child's run is a DBOS workflow whose id is the parent call's dispatch id.

The first dispatch mints the child's session (never derived from the parent's ids) and binds it to
the delegation, in the same transaction as the attempt record. Re-dispatching the same id returns
the existing child, so recovery re-attaches to it or starts it once, whichever process runs it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..ledger import store
from ..ledger import tables as t
from . import commits
from .bodies import plain_tx
from .state import env


def _delegate(conn: sa.Connection, run_id: str, dispatch_id: str) -> dict[str, Any]:
    gate = commits.gate(conn, run_id, dispatch_id)
    if gate["action"] == "done":
        return gate
    call = store.get_call(conn, dispatch_id)
    parent = store.get_run(conn, run_id)
    assert call is not None and parent is not None
    sub = env().agent(parent["agent_name"]).sub_agent(call["tool_name"])
    if call["child_session_id"] is None:
        if sub is None:
            raise LookupError(f"sub-agent tool {call['tool_name']!r} is no longer defined")
        child_sid = store.new_id()
        store.insert_session(conn, child_sid, sub.agent.name, parent_dispatch_id=dispatch_id)
        session = store.get_session(conn, child_sid)
        assert session is not None and store.claim_session(conn, session, dispatch_id)
        store.insert_run(
            conn,
            run_id=dispatch_id,
            session_id=child_sid,
            seq=1,
            agent_name=sub.agent.name,
            entry="start",
            entry_message=(call["args"] or {}).get("message", ""),
            max_steps=sub.agent.max_steps,
            recovery=env().profile,
        )
        conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(child_session_id=child_sid))
        store.emit(conn, call["session_id"], run_id, "subagent_start", {"dispatch_id": dispatch_id, "child_session_id": child_sid, "agent": sub.agent.name})
        gate["child_session_id"] = child_sid
    gate["dispatch_id"] = dispatch_id
    return gate


async def delegate_gate(run_id: str, dispatch_id: str) -> dict[str, Any]:
    return dict(await plain_tx(_delegate, run_id, dispatch_id))


def _record(conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, child: dict[str, Any]) -> dict[str, Any]:
    if child.get("status") == "completed":
        return commits.record(conn, run_id, dispatch_id, attempt, "ok", child.get("output"), None)
    code = child.get("error_code") or ("subagent_lost" if child.get("status") == "lost" else "subagent_failed")
    error = {"type": code, "message": child.get("error") or f"the sub-agent ended {child.get('status')}"}
    return commits.record(conn, run_id, dispatch_id, attempt, "error", None, error)


async def record_child(run_id: str, dispatch_id: str, attempt: int, child: dict[str, Any]) -> dict[str, Any]:
    return dict(await plain_tx(_record, run_id, dispatch_id, attempt, child))
