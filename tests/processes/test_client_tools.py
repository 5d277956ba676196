"""Client tools on both databases: the run suspends, the client's answer settles the call (in another
process, after a crash and a relaunch), and a failed run drops the calls no answer can reach any more."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from helix_dbos.errors import CallsPendingError, StaleAnswerError
from helix_dbos.ledger import tables as t
from helix_dbos.recovery import OUTCOME_UNKNOWN
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.familykit import Family, dump_ledger
from tests.scenarios import family



def _seen(kit: Family, agent: str) -> list[Any]:
    """What the agent's latest model request was told; every request went to the test's SDK
    (``scenario_sdk``: the client tool is offered with ``from_openai_agents(client_tools=...)``)."""
    asked = [m for m in kit.lines("model") if m["agent"] == agent]
    assert {m.get("sdk", "pydantic_ai") for m in asked} == {os.environ.get("SCENARIO_SDK", "pydantic_ai")}
    return asked[-1]["seen"]


@pytest.mark.kills
def test_client_tool_round_trip_across_a_crash_and_restarts(make_runtime: Any, fam: Family, scenario_sdk: str) -> None:
    sid = uuid.uuid4().hex
    # The reply: ask_user (the client executes it) and note (a safe body). Die as note's body starts.
    crashed = fam.run("start", "--agent", "clienty", "--message", "ask", "--session", sid,
                      env={"HELIX_DBOS_CRASH_AT": "before_body:note"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    (ask_saved,) = fam.rows(t.calls, t.calls.c.session_id == sid, t.calls.c.tool_name == "ask_user")

    woke = fam.ok("wake", "--session", sid)  # recovery runs note again; ask_user is left to the client
    assert woke["status"] == "suspended_client_tool"
    (pending,) = woke["pending"]
    assert pending == {"dispatch_id": ask_saved["dispatch_id"], "tool_name": "ask_user", "kind": "client",
                       "args": {"question": "favourite colour?"}}
    assert fam.rows(t.calls, t.calls.c.dispatch_id == pending["dispatch_id"]) == [ask_saved]  # untouched
    note = next(c for c in woke["calls"] if c["tool"] == "note")
    assert note["status"] == "ok" and note["attempts"] == 2

    rt = make_runtime(family.agents())  # another process answers
    with pytest.raises(CallsPendingError):
        rt.resume(sid)
    receipt = rt.submit_tool_result(sid, pending["dispatch_id"], result={"colour": "green"})
    assert receipt.remaining == [] and receipt.run is not None
    result = receipt.run.result(timeout=60)
    assert result.status == "completed"
    (ask,) = rt.session(sid).calls_named("ask_user")
    assert ask.status == "ok" and ask.result == {"colour": "green"} and ask.attempts == []
    (row,) = fam.rows(t.calls, t.calls.c.dispatch_id == ask.dispatch_id)
    assert row["paired_by"] == "answer" and row["answered_at"] is not None
    assert _seen(fam, "clienty") == [{"colour": "green"}, {"tool": "note", "key": "n1"}]
    assert len([m for m in fam.lines("model") if m["agent"] == "clienty" and m["step"] == 0]) == 1


def test_a_client_error_settles_the_call_as_an_error(make_runtime: Any, fam: Family, scenario_sdk: str) -> None:
    rt = make_runtime(family.agents())
    suspended = rt.start("clienty", "ask").result(timeout=60)
    (pending,) = suspended.pending
    assert pending.kind == "client" and pending.args == {"question": "favourite colour?"}
    result = rt.submit_tool_result(suspended.session_id, pending.dispatch_id, error="the user closed the tab").run.result(timeout=60)
    assert result.status == "completed"
    (ask,) = rt.session(suspended.session_id).calls_named("ask_user")
    assert ask.status == "error" and ask.error == {"type": "client_error", "message": "the user closed the tab"}
    assert _seen(fam, "clienty")[0] == {"status": "error", "error": {"type": "client_error", "message": "the user closed the tab"}}


def test_a_failed_run_drops_its_unanswered_calls(make_runtime: Any, fam: Family, monkeypatch: pytest.MonkeyPatch, scenario_sdk: str) -> None:
    rt = make_runtime(family.agents())
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "step_commit")  # a store error where the suspension commits
    failed = rt.start("clienty", "ask").result(timeout=60)
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")
    assert failed.status == "failed" and failed.pending == []
    (ask,) = rt.session(failed.session_id).calls_named("ask_user")
    assert ask.status == "outcome_unknown" and ask.note == OUTCOME_UNKNOWN  # the client may have acted on it
    before = dump_ledger(fam.engine)
    with pytest.raises(StaleAnswerError):
        rt.submit_tool_result(failed.session_id, ask.dispatch_id, result={"colour": "red"})
    assert dump_ledger(fam.engine) == before

    retried = rt.retry(failed.session_id).result(timeout=60)  # the dropped call stays dropped
    assert retried.status == "completed"
    (again,) = rt.session(failed.session_id).calls_named("ask_user")
    assert again.status == "outcome_unknown" and again.dispatch_id == ask.dispatch_id
    assert _seen(fam, "clienty")[0] == {"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}
