"""A rewind over a pending approval or client call: the branch it leaves behind is answered at once.

``resume(mode="from_checkpoint")`` to an earlier checkpoint supersedes the later branch; a call of
that branch still awaiting an answer used to stay ``pending`` for ever, listed as waiting by the
run's ``pending``, the service and the audit view, and refused as stale when answered. The rewind
now pairs it (``not_started``: nothing ran, or ``outcome_unknown`` for a client call, which the
client may have acted on) in the rewind's own transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.cli.main import app as cli
from helix_dbos.errors import StaleAnswerError
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.recovery import NOT_STARTED, OUTCOME_UNKNOWN
from helix_dbos.service.app import create_app
from tests.support.crashkit import transcript_problems


class Confirm(pydantic.BaseModel):
    what: str


def agent_asking(kind: str, asked: list[int], bodies: list[str]) -> hx.Agent:
    """Step 0 runs a safe ``note`` body; each later step asks for one answer (an approval of ``pay``
    or the client's ``confirm``), a fresh call every time the model reaches that step."""

    @hx.tool(replay="safe")
    async def note(ctx: hx.ToolContext, text: str) -> str:
        """Write a note."""
        bodies.append(f"note:{ctx.dispatch_id}")
        return "noted"

    @hx.tool(requires_approval=True)
    async def pay(ctx: hx.ToolContext, amount: int) -> str:
        """Pay an amount."""
        bodies.append(f"pay:{ctx.dispatch_id}")
        return f"paid {amount}"

    confirm = hx.client_tool(name="confirm", description="Ask the user to confirm.", input_schema=Confirm)

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        asked.append(step)
        if step == 0:
            return ModelResponse(parts=[ToolCallPart("note", {"text": "hi"}, tool_call_id="n0")])
        if step == 1:
            n = asked.count(1)
            call = ToolCallPart("pay", {"amount": 10 * n}, tool_call_id=f"p{n}") if kind == "approval" else ToolCallPart("confirm", {"what": f"v{n}"}, tool_call_id=f"c{n}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    return hx.Agent(f"rewinder_{kind}", FunctionModel(reply), tools=[note, pay, confirm])


def cli_calls(db_url: str, *args: str) -> list[dict[str, Any]]:
    """``helix-dbos calls ... --json`` as an operator runs it (Typer's runner: the real command, in-process)."""
    result = CliRunner().invoke(cli, ["calls", *args, "--db", db_url, "--json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def audit_waiting(db_url: str, session_id: str) -> list[str]:
    """docs/audit.md's "still waiting" query, for approvals and for client calls."""
    prefix = "" if is_sqlite(db_url) else "helix."
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT dispatch_id FROM {prefix}call_audit WHERE session_id = :s AND status = 'pending' "
                        "AND (kind = 'client' OR (requires_approval AND approved IS NULL)) ORDER BY step, position"),
                {"s": session_id},
            )
            return [str(r[0]) for r in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["approval", "client"])
def test_rewind_pairs_the_pending_call_it_leaves_behind(db_url: str, make_runtime: Callable[..., hx.Runtime], kind: str) -> None:
    asked: list[int] = []
    bodies: list[str] = []
    rt = make_runtime([agent_asking(kind, asked, bodies)])
    sid = uuid.uuid4().hex
    first = rt.start(f"rewinder_{kind}", "go", session_id=sid).result(timeout=60)
    assert first.status == "suspended_client_tool"
    [old] = first.pending
    assert old.kind == kind and audit_waiting(db_url, sid) == [old.dispatch_id]
    step0 = next(c for c in rt.session(sid).checkpoints if c["kind"] == "append" and c["step"] == 0)

    rewound = rt.resume(sid, mode="from_checkpoint", checkpoint_id=step0["checkpoint_id"]).result(timeout=60)
    assert rewound.status == "suspended_client_tool"  # the rewound branch asks again: a new call
    [new] = rewound.pending
    assert new.dispatch_id != old.dispatch_id  # only the live branch's call is waiting

    view = rt.session(sid)
    left = view.call(old.dispatch_id)
    expected = ("not_started", NOT_STARTED) if kind == "approval" else ("outcome_unknown", OUTCOME_UNKNOWN)
    assert (left.status, left.note) == expected, left
    assert [c.dispatch_id for c in view.calls if c.status == "pending"] == [new.dispatch_id]
    assert rt.get_run(first.run_id).pending == []  # the old run no longer lists it either
    assert audit_waiting(db_url, sid) == [new.dispatch_id]
    listed = {c["dispatch_id"]: c["status"] for c in cli_calls(db_url, "--session", sid)}
    assert listed[old.dispatch_id] == expected[0] and listed[new.dispatch_id] == "pending", listed  # the CLI agrees
    assert [c["dispatch_id"] for c in cli_calls(db_url, "--session", sid, "--status", "pending")] == [new.dispatch_id]
    assert asked == [0, 1, 1] and bodies == [bodies[0]]  # step 0 not asked again, its body not run again

    app = create_app(rt)  # the service over this launched runtime (no lifespan: it is launched already)
    http = TestClient(app, base_url="http://localhost")  # a Host the service trusts
    assert [p["dispatch_id"] for p in http.get(f"/runs/{rewound.run_id}").json()["pending"]] == [new.dispatch_id]
    assert http.get(f"/runs/{first.run_id}").json()["pending"] == []
    service_call = next(c for c in http.get(f"/sessions/{sid}").json()["calls"] if c["dispatch_id"] == old.dispatch_id)
    assert service_call["status"] == expected[0]

    answer: Callable[[], Any] = (
        (lambda: rt.approve(sid, old.dispatch_id, approved=True)) if kind == "approval" else (lambda: rt.submit_tool_result(sid, old.dispatch_id, result="yes"))
    )
    with pytest.raises(StaleAnswerError) as refused:
        answer()
    assert refused.value.code == "stale_answer"
    assert "rewound" in str(refused.value) and expected[0] in str(refused.value), str(refused.value)
    route = f"/sessions/{sid}/calls/{old.dispatch_id}/" + ("approval" if kind == "approval" else "result")
    response = http.post(route, json={"approved": True} if kind == "approval" else {"result": "yes"})
    assert response.status_code == 409 and response.json()["code"] == "stale_answer", response.text
    assert rt.session(sid).call(old.dispatch_id).status == expected[0]  # the refusal changed nothing

    # the live branch's call is answered as usual and the run finishes on it
    receipt = rt.approve(sid, new.dispatch_id, approved=True) if kind == "approval" else rt.submit_tool_result(sid, new.dispatch_id, result="yes")
    assert receipt.run is not None and receipt.run.result(timeout=60).status == "completed"
    assert asked == [0, 1, 1, 2]
    assert bodies[1:] == ([f"pay:{new.dispatch_id}"] if kind == "approval" else [])  # the left-behind call never ran
    assert transcript_problems(db_url, sid) == []
    assert rt.session(sid).call(old.dispatch_id).status == expected[0]
