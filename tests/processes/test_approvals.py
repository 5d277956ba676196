"""Approvals on both databases: suspend, decide (who and why), run the approved body once, deny with a
reason, and refuse every answer that does not fit, typed and without writing anything."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from helix_dbos.errors import (
    AnswerKindError,
    CallNotFoundError,
    DuplicateAnswerError,
    HelixError,
    SessionNotFoundError,
    StaleAnswerError,
    ValidationError,
)
from helix_dbos.ledger import tables as t
from helix_dbos.recovery import OUTCOME_UNKNOWN
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.familykit import Family, dump_ledger
from tests.scenarios import family
from tests.support.waiting import wait_for



def asked_through(kit: Family, sdk: str) -> bool:
    """Whether every request of the approver went to the SDK the test chose (its model logs which)."""
    asked = [m.get("sdk", "pydantic_ai") for m in kit.lines("model") if m["agent"] == "approver"]
    return bool(asked) and set(asked) == {sdk}


def refused(kit: Family, error: type[HelixError], answer: Callable[[], Any]) -> HelixError:
    """Assert ``answer`` raises ``error`` and leaves every ledger table exactly as it was."""
    before = dump_ledger(kit.engine)
    with pytest.raises(error) as caught:
        answer()
    assert dump_ledger(kit.engine) == before, f"{error.__name__} changed the ledger"
    assert isinstance(caught.value.code, str) and caught.value.status in (400, 404, 409)
    return caught.value


@pytest.mark.kills
def test_approval_round_trip_across_restarts_with_recovery_leaving_it_pending(make_runtime: Any, fam: Family, scenario_sdk: str) -> None:
    sid = uuid.uuid4().hex
    # The reply: wire 500 (the rule asks for approval), wire 50 (it does not), purge (always asks).
    crashed = fam.run("start", "--agent", "approver", "--message", "pay", "--session", sid,
                      env={"HELIX_DBOS_CRASH_AT": "before_body:wire"})  # dies as wire 50's body starts
    assert crashed.code == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    saved = {r["dispatch_id"]: r for r in fam.rows(t.calls, t.calls.c.session_id == sid)}
    assert [r["status"] for r in sorted(saved.values(), key=lambda r: r["position"])] == ["pending", "running", "pending"]

    woke = fam.ok("wake", "--session", sid)  # recovery: answers wire 50, leaves the approvals alone
    assert woke["status"] == "suspended_client_tool"
    pending = {p["dispatch_id"]: p for p in woke["pending"]}
    assert [(p["tool_name"], p["kind"], p["args"]) for p in woke["pending"]] == [
        ("wire", "approval", {"amount": 500, "to": "ann"}), ("purge", "approval", {"key": "old"})]
    for dispatch_id in pending:
        row = fam.rows(t.calls, t.calls.c.dispatch_id == dispatch_id)[0]
        assert row == saved[dispatch_id]  # recovery never touched a pending call: same row, byte for byte
    assert [c["status"] for c in woke["calls"]] == ["pending", "outcome_unknown", "pending"]
    assert fam.bodies("wire") == []  # wire 50 died before its body began, and was never run again

    rt = make_runtime(family.agents())  # a third process answers
    wire_id, purge_id = list(pending)
    first = rt.approve(sid, wire_id, approved=True, reason="invoice 7", actor="alice")
    assert first.remaining == [purge_id] and first.run is None
    second = rt.approve(sid, purge_id, approved=False, reason="keep the old data", actor="bob")
    assert second.remaining == [] and second.run is not None
    result = second.run.result(timeout=60)
    assert result.status == "completed"

    calls = {c.dispatch_id: c for c in rt.session(sid).calls}
    assert calls[wire_id].status == "ok" and calls[wire_id].result == {"wired": 500, "to": "ann"}
    assert [a["attempt"] for a in calls[wire_id].attempts] == [1]  # its first attempt, after the approval
    assert calls[purge_id].status == "denied" and calls[purge_id].attempts == []
    (wire_row,) = fam.rows(t.calls, t.calls.c.dispatch_id == wire_id)
    (purge_row,) = fam.rows(t.calls, t.calls.c.dispatch_id == purge_id)
    assert (wire_row["approved"], wire_row["approval_actor"], wire_row["approval_reason"]) == (True, "alice", "invoice 7")
    assert (purge_row["approved"], purge_row["approval_actor"], purge_row["approval_reason"]) == (False, "bob", "keep the old data")
    assert wire_row["answered_at"] is not None and purge_row["paired_by"] == "answer"
    (ann,) = fam.bodies("wire")
    assert ann["key"] == "ann:500" and ann["pid"] == os.getpid() and fam.bodies("purge") == []
    seen = [m["seen"] for m in fam.lines("model") if m["agent"] == "approver"][-1]
    assert seen[0] == {"wired": 500, "to": "ann"}
    assert seen[1] == {"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}
    assert seen[2] == {"status": "denied", "message": "the call was denied: keep the old data"}
    decided = fam.rows(t.events, t.events.c.session_id == sid, t.events.c.type == "approval_decided")
    assert [(e["data"]["actor"], e["data"]["approved"]) for e in decided] == [("alice", True), ("bob", False)]
    assert asked_through(fam, scenario_sdk)


def test_refused_answers_are_typed_and_store_nothing(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    gated = rt.start("approver", "pay").result(timeout=60)
    asking = rt.start("clienty", "ask").result(timeout=60)
    assert gated.status == asking.status == "suspended_client_tool"
    wire_id, purge_id = (p.dispatch_id for p in gated.pending)
    (ask_id,) = (p.dispatch_id for p in asking.pending)
    plain_wire = next(c for c in rt.session(gated.session_id).calls if c.status == "ok").dispatch_id
    plain_note = next(c for c in rt.session(asking.session_id).calls if c.tool_name == "note").dispatch_id
    a, b = gated.session_id, asking.session_id

    # the wrong kind of answer for the pending call, or an answer for a call that awaits none
    refused(fam, AnswerKindError, lambda: rt.approve(b, ask_id, approved=True))
    refused(fam, AnswerKindError, lambda: rt.submit_tool_result(a, wire_id, result={"ok": True}))
    refused(fam, AnswerKindError, lambda: rt.approve(a, plain_wire, approved=True))
    refused(fam, AnswerKindError, lambda: rt.submit_tool_result(b, plain_note, result=1))
    # unknown or foreign calls, unknown sessions, results JSON cannot hold
    refused(fam, CallNotFoundError, lambda: rt.approve(a, uuid.uuid4().hex))
    refused(fam, CallNotFoundError, lambda: rt.approve(a, ask_id))
    refused(fam, CallNotFoundError, lambda: rt.submit_tool_result(a, ask_id, result="blue"))
    refused(fam, SessionNotFoundError, lambda: rt.submit_tool_result(uuid.uuid4().hex, ask_id, result="blue"))
    refused(fam, ValidationError, lambda: rt.submit_tool_result(b, ask_id, result=object()))

    # a second answer
    assert rt.approve(a, wire_id, approved=True, actor="alice").remaining == [purge_id]
    refused(fam, DuplicateAnswerError, lambda: rt.approve(a, wire_id, approved=False))
    # an answer after the run moved on (a new turn redirected the suspended step)
    moved = rt.start("clienty", "something else", session_id=b).result(timeout=60)
    assert moved.status == "suspended_client_tool" and moved.pending[0].dispatch_id != ask_id
    stale = refused(fam, StaleAnswerError, lambda: rt.submit_tool_result(b, ask_id, result="blue"))
    assert stale.code == "stale_answer"
    # an answer after the run failed (aborted while suspended): its unanswered calls were dropped
    assert rt.stop(a, kind="abort").status == "failed"
    assert rt.get_run(gated.run_id).pending == []
    refused(fam, StaleAnswerError, lambda: rt.approve(a, purge_id, approved=True))
    assert {c.dispatch_id: c.status for c in rt.session(a).calls}[purge_id] == "run_stopped"


def test_a_callable_rule_decides_per_call(make_runtime: Any, fam: Family, scenario_sdk: str) -> None:
    rt = make_runtime(family.agents())
    result = rt.start("approver", "pay").result(timeout=60)
    kinds = {(p.tool_name, p.args.get("amount")) for p in result.pending}
    assert kinds == {("wire", 500), ("purge", None)}  # wire 50 ran without asking
    rows = {r["position"]: r for r in fam.rows(t.calls, t.calls.c.session_id == result.session_id)}
    assert [rows[i]["requires_approval"] for i in range(3)] == [True, False, True]
    assert [b["key"] for b in fam.bodies("wire")] == ["bob:50"]
    assert asked_through(fam, scenario_sdk)


@pytest.mark.kills
def test_an_approved_unsafe_body_killed_midway_is_outcome_unknown_and_never_run_again(db_url: str, fam: Family, scenario_sdk: str) -> None:
    """The service approves wire 500 over HTTP (purge still waits, so no run starts); another
    process approves purge and is SIGKILLed while purge's unsafe body runs. The relaunch answers
    purge ``outcome_unknown`` and never runs it again; wire 500, approved over HTTP, ran once."""
    from fastapi.testclient import TestClient

    import helix_dbos as hx
    from helix_dbos.service.app import create_app

    sid = uuid.uuid4().hex
    first = fam.ok("start", "--agent", "approver", "--message", "pay", "--session", sid)
    assert first["status"] == "suspended_client_tool"
    ids = {p["tool_name"]: p["dispatch_id"] for p in first["pending"]}
    service = hx.Runtime(family.agents(), database_url=db_url, executor_id=f"svc-{uuid.uuid4().hex[:8]}", serve_queue=False, takeover=False)
    with TestClient(create_app(service), base_url="http://localhost") as http:
        answer = http.post(f"/sessions/{sid}/calls/{ids['wire']}/approval", json={"approved": True, "reason": "invoice 7"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["remaining"] == [ids["purge"]] and answer.json()["run"] is None

    fam.hold("old")  # purge's body holds until the kill
    approving = fam.spawn("approve", "--session", sid, "--dispatch", ids["purge"], "--actor", "bob")
    try:
        wait_for("purge's body to start", lambda: fam.bodies("purge"))
        wait_for("wire 500's result to be recorded",
                 lambda: fam.rows(t.calls, t.calls.c.dispatch_id == ids["wire"])[0]["status"] == "ok")
        approving.send_signal(signal.SIGKILL)
        approving.wait(30)
    finally:
        if approving.poll() is None:
            approving.kill()
            approving.wait(30)
    fam.release("old")

    woke = fam.ok("wake", "--session", sid)  # recovery: purge may have run, and is unsafe
    assert woke["status"] == "completed", woke
    calls = {c["dispatch_id"]: c for c in woke["calls"]}
    assert (calls[ids["purge"]]["status"], calls[ids["purge"]]["attempts"]) == ("outcome_unknown", 1)
    assert (calls[ids["wire"]]["status"], calls[ids["wire"]]["result"]) == ("ok", {"wired": 500, "to": "ann"})
    assert [b["key"] for b in fam.bodies("purge")] == ["old"]  # once, never again
    assert sorted(b["key"] for b in fam.bodies("wire")) == ["ann:500", "bob:50"]  # each once
    (wire_row,) = fam.rows(t.calls, t.calls.c.dispatch_id == ids["wire"])
    assert (wire_row["approved"], wire_row["approval_reason"]) == (True, "invoice 7")
    seen = [m["seen"] for m in fam.lines("model") if m["agent"] == "approver"][-1]
    assert seen == [{"wired": 500, "to": "ann"}, {"wired": 50, "to": "bob"}, {"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}]
    assert asked_through(fam, scenario_sdk)
