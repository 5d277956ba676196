"""Stop on both databases: one durable record, written from another process, honoured before each model
request and each body start; finished calls keep their results, the rest are paired run_stopped."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from helix_dbos import StopReceipt
from helix_dbos.errors import (
    NothingToResumeError,
    SessionNotFoundError,
    ValidationError,
)
from helix_dbos.ledger import tables as t
from helix_dbos.recovery import RUN_STOPPED
from tests.scenarios import family
from tests.support.familykit import Family, dump_ledger
from tests.support.waiting import wait_for


@pytest.mark.parametrize("kind", ["interrupt", "abort"])
def test_stop_from_another_process_during_a_body_and_during_a_model_request(make_runtime: Any, fam: Family, kind: str, scenario_sdk: str) -> None:
    """The stopper (a body) and the waiter (a model request) are OpenAI Agents SDK agents under
    ``scenario_sdk=openai_agents``: a stop is the runtime's, the same at the adapter seam."""
    rt = make_runtime(family.agents())
    fam.hold("slow1")  # stopper's first body holds
    fam.hold("model_waiter")  # waiter's model request holds
    fam.hold("model_clienty")  # so does clienty's, whose reply will ask the client
    in_body = rt.start("stopper", "go")
    in_model = rt.start("waiter", "go")
    asking = rt.start("clienty", "ask")
    wait_for("the long body", lambda: fam.bodies("slow"))
    wait_for("the model requests", lambda: {m["agent"] for m in fam.lines("model")} >= {"waiter", "clienty"})

    handles = (in_body, in_model, asking)
    out = fam.ok("stop", "--session", ",".join(h.session_id for h in handles), "--kind", kind)  # another process
    assert [s["status"] for s in out["stops"]] == ["stop_requested"] * 3
    assert [s["run_id"] for s in out["stops"]] == [h.run_id for h in handles]
    # stop() returned at once: the runs are still in flight, each with one durable stop record
    assert {r["status"] for r in fam.rows(t.runs, t.runs.c.run_id.in_([h.run_id for h in handles]))} == {"running"}
    stops = fam.rows(t.stops)
    assert sorted((s["run_id"], s["kind"]) for s in stops) == sorted((h.run_id, kind) for h in handles)

    fam.release("slow1")
    fam.release("model_waiter")
    fam.release("model_clienty")
    expected = "interrupted" if kind == "interrupt" else "failed"
    for handle in handles:
        result = handle.result(timeout=60)
        assert result.status == expected
        assert result.error_code == (None if kind == "interrupt" else "run_stopped")

    body_calls = {c.tool_name: c for c in rt.session(in_body.session_id).calls}
    assert body_calls["slow"].status == "ok" and body_calls["slow"].result == {"tool": "slow", "key": "slow1"}  # finished: kept
    assert body_calls["after"].status == "run_stopped" and body_calls["after"].note == RUN_STOPPED
    assert body_calls["after"].attempts == []  # checked before its body started: never ran
    (model_call,) = rt.session(in_model.session_id).calls
    assert model_call.status == "run_stopped" and model_call.attempts == []
    # a reply that would suspend on the client stops instead: nothing is left waiting for an answer
    assert {c.tool_name: c.status for c in rt.session(asking.session_id).calls} == {"ask_user": "run_stopped", "note": "run_stopped"}
    assert rt.get_run(asking.run_id).pending == []
    assert [b["key"] for b in fam.bodies()] == ["slow1"]  # no other body ever ran
    # no model request after the stop: each agent was asked exactly once
    assert [m["agent"] for m in fam.lines("model")].count("stopper") == 1
    assert [m["agent"] for m in fam.lines("model")].count("waiter") == 1
    assert {m.get("sdk", "pydantic_ai") for m in fam.lines("model") if m["agent"] in ("stopper", "waiter")} == {scenario_sdk}
    if kind == "interrupt":  # resumable: the model gets the step's results and goes on
        resumed = rt.resume(in_body.session_id).result(timeout=60)
        assert resumed.status == "completed" and RUN_STOPPED in resumed.output
    else:  # failed, like any failed run: only a retry goes on from it
        assert rt.retry(in_body.session_id).result(timeout=60).status == "completed"


@pytest.mark.parametrize("kind", ["interrupt", "abort"])
def test_a_stop_during_the_final_model_request_ends_the_run_stopped(make_runtime: Any, fam: Family, kind: str, scenario_sdk: str) -> None:
    """The model's final answer arrives after the stop was recorded: the reply is kept (it was paid
    for) and the run ends stopped at that commit, never ``completed`` past a ``stop_requested``
    receipt (test_withdraw_race found SQLite completing such runs). For both SDKs."""
    rt = make_runtime(family.agents())
    fam.hold("waited")  # the body holds, so the second model request can be held before it starts
    handle = rt.start("waiter", "go")
    wait_for("the body", lambda: fam.bodies("after"))
    fam.hold("model_waiter")
    fam.release("waited")
    wait_for("the final model request", lambda: [m["agent"] for m in fam.lines("model")].count("waiter") == 2)

    receipt = rt.stop(handle.session_id, kind=kind)
    assert receipt.status == "stop_requested" and not receipt.stopped
    fam.release("model_waiter")
    result = handle.result(timeout=120)
    assert result.status == ("interrupted" if kind == "interrupt" else "failed"), result
    assert result.error_code == (None if kind == "interrupt" else "run_stopped")
    session = rt.session(handle.session_id)
    (call,) = session.calls
    assert call.status == "ok" and call.result == {"tool": "after", "key": "waited"}  # finished before the stop: kept
    replies = [p.content for m in session.messages for p in getattr(m, "parts", []) if type(p).__name__ == "TextPart"]
    assert any(r.startswith("waiter finished") for r in replies), replies  # the paid reply is in the transcript
    assert [m["agent"] for m in fam.lines("model")].count("waiter") == 2 and len(fam.bodies()) == 1
    assert {m.get("sdk", "pydantic_ai") for m in fam.lines("model")} == {scenario_sdk}


def test_stop_of_a_suspended_run_settles_at_once(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    first = rt.start("clienty", "ask").result(timeout=60)
    assert first.status == "suspended_client_tool"
    out = rt.stop(first.session_id, kind="interrupt")
    assert out == StopReceipt(session_id=first.session_id, run_id=first.run_id, kind="interrupt", stopped=True, status="interrupted")
    assert rt.get_run(first.run_id).status == "interrupted" and rt.get_run(first.run_id).pending == []
    (ask,) = rt.session(first.session_id).calls_named("ask_user")
    assert ask.status == "run_stopped"
    resumed = rt.resume(first.session_id).result(timeout=60)
    assert resumed.status == "completed"


def test_bad_stops_are_typed_and_change_nothing(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    done = rt.start("local_boss", "hills").result(timeout=60)
    fam.hold("slow1")
    live = rt.start("stopper", "go")
    wait_for("the long body", lambda: fam.bodies("slow"))
    for error, call in [
        (ValidationError, lambda: rt.stop(live.session_id, kind="pause")),
        (SessionNotFoundError, lambda: rt.stop(uuid.uuid4().hex)),
        (NothingToResumeError, lambda: rt.stop(done.session_id)),  # completed: no live run to stop
    ]:
        before = dump_ledger(fam.engine)
        with pytest.raises(error):
            call()
        assert dump_ledger(fam.engine) == before
    assert rt.stop(live.session_id, kind="interrupt").status == "stop_requested"
    before = dump_ledger(fam.engine)
    assert rt.stop(live.session_id, kind="abort").status == "stop_already_requested"  # one record per run
    assert dump_ledger(fam.engine) == before
    fam.release("slow1")
    assert live.result(timeout=60).status == "interrupted"
