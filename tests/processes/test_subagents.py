"""Sub-agents on both databases: remote children on a second worker, local children, companions.

Crashes are real: a parent process SIGKILLed or ``os._exit``-ed (``HELIX_DBOS_CRASH_AT``) and
relaunched under its executor id. What ran is counted outside the runtime, in the fsynced effect
files the scenario's tools and models write (``tests/scenarios/family.py``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS
from pydantic_ai.messages import ToolCallPart

import helix_dbos as hx
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import is_sqlite
from helix_dbos.recovery import OUTCOME_UNKNOWN
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.familykit import Family
from tests.scenarios import family
from tests.support.waiting import wait_for



def _no_request_twice(kit: Family, agent: str) -> None:
    counts = kit.model_requests(agent)
    assert counts and max(counts.values()) == 1, f"{agent} was asked twice for the same step: {counts}"


def _notifications_to(kit: Family, workflow_id: str) -> int:
    name = "notifications" if is_sqlite(kit.db_url) else "dbos.notifications"
    with kit.engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {name} WHERE destination_uuid = :d"), {"d": workflow_id}).scalar_one())


# --- remote sub-agents ---------------------------------------------------------------------------------


def test_remote_child_is_a_bound_child_workflow_and_its_output_is_the_result(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    result = rt.start("remote_boss", "tides explode").result(timeout=60)
    assert result.status == "completed"
    good, bad = rt.session(result.session_id).calls
    assert good.status == "ok" and good.result == {"topic": "tides", "digs": 1}  # structured: output_type Finding
    assert bad.status == "error" and bad.error["type"] == "subagent_failed" and "model is down" in bad.error["message"]
    seen = [m["seen"] for m in fam.lines("model") if m["agent"] == "remote_boss"]
    assert seen[1] == [{"topic": "tides", "digs": 1}]  # the parent's model got the child's output as the tool result

    for call, status in ((good, "completed"), (bad, "failed")):
        (child,) = fam.rows(t.sessions, t.sessions.c.session_id == call.child_session_id)
        assert child["agent_name"] == "researcher" and child["parent_dispatch_id"] == call.dispatch_id
        assert call.child_session_id not in (result.session_id, f"{result.session_id}__sub__{call.tool_call_id}")
        (run,) = fam.rows(t.runs, t.runs.c.session_id == call.child_session_id)
        assert run["run_id"] == call.dispatch_id and run["status"] == status
        (wf,) = fam.dbos_workflows(call.dispatch_id)
        assert wf["queue_name"] == rt.queue_name and wf["parent_workflow_id"] == result.run_id
    assert rt.session(good.child_session_id).messages[0].parts[0].content == "tides"


#: The columns a run is opened with (the rest are written as it runs and ends).
OPENING = ("seq", "agent_name", "entry", "entry_message", "max_steps", "recovery", "executor_id", "status")


def test_an_entry_a_remote_child_and_a_companion_turn_open_their_runs_alike(make_runtime: Any, fam: Family) -> None:
    """One way to open a run: every opener stamps the admitting executor and derives the same columns."""
    rt = make_runtime(family.AGENTS)
    remote = rt.start("remote_boss", "tides").result(timeout=60)
    pal = rt.start("pal_boss", "one").result(timeout=60)
    assert remote.status == pal.status == "completed"
    (child,) = rt.session(remote.session_id).calls
    (turn,) = rt.session(pal.session_id).calls
    rows = {
        "entry": fam.rows(t.runs, t.runs.c.run_id == remote.run_id)[0],
        "remote child": fam.rows(t.runs, t.runs.c.run_id == child.dispatch_id)[0],
        "companion turn": fam.rows(t.runs, t.runs.c.run_id == turn.dispatch_id)[0],
    }
    expected = {"entry": ("remote_boss", "tides"), "remote child": ("researcher", "tides"), "companion turn": ("pal", "one")}
    for opener, row in rows.items():
        assert {c: row[c] is not None for c in OPENING} == dict.fromkeys(OPENING, True), (opener, row)
        assert row["executor_id"] == rt.executor_id, (opener, row)
        assert (row["seq"], row["entry"], row["recovery"], row["previous_run_id"]) == (1, "start", "full", None), (opener, row)
        agent = expected[opener][0]
        assert (row["agent_name"], row["entry_message"], row["max_steps"]) == (agent, expected[opener][1], rt.agents[agent].max_steps), (opener, row)


@pytest.mark.kills
def test_remote_child_on_a_second_worker_survives_a_parent_kill(make_runtime: Any, fam: Family) -> None:
    sid = uuid.uuid4().hex
    fam.hold("tides")  # the child's tool holds until the parent is dead
    with fam.worker() as worker:
        parent = fam.spawn("start", "--agent", "remote_boss", "--message", "tides", "--session", sid, serve=False)
        (dig,) = wait_for("the child's tool to start", lambda: fam.bodies("dig"))
        assert dig["pid"] == worker.pid  # served by the second worker, not the parent
        parent.kill()
        assert parent.wait(timeout=30) < 0
        fam.release("tides")
        # Relaunch under the parent's executor id (here, in the test process): DBOS recovers the parent run.
        rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor, serve_queue=False)
        result = rt.wait(sid, timeout=60)
    assert result.status == "completed"
    (call,) = family.report(rt, result)["calls"]
    assert call["status"] == "ok" and call["result"] == {"topic": "tides", "digs": 1}
    assert len(fam.bodies("dig")) == 1  # the child ran once
    _no_request_twice(fam, "researcher")
    _no_request_twice(fam, "remote_boss")
    assert [r["run_id"] for r in fam.rows(t.runs, t.runs.c.session_id == call["child_session_id"])] == [call["dispatch_id"]]
    (wf,) = fam.dbos_workflows(call["dispatch_id"])
    assert wf["status"] == "SUCCESS" and wf["executor_id"].startswith("worker-") and wf["parent_workflow_id"] == result.run_id


def test_retry_reuses_the_dispatch_id_and_starts_no_second_child(make_runtime: Any, fam: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = make_runtime(family.AGENTS)
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "child_result")  # the parent fails after its child finished
    first = rt.start("remote_boss", "tides").result(timeout=60)
    assert first.status == "failed" and first.error_code == "injected_fault"
    (call,) = rt.session(first.session_id).calls
    assert call.status == "outcome_unknown" and len(call.attempts) == 1
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")

    second = rt.retry(first.session_id).result(timeout=60)
    assert second.status == "completed"
    (again,) = rt.session(first.session_id).calls
    assert again.dispatch_id == call.dispatch_id and again.child_session_id == call.child_session_id
    assert again.status == "ok" and again.result == {"topic": "tides", "digs": 1} and len(again.attempts) == 2
    assert len(fam.bodies("dig")) == 1
    _no_request_twice(fam, "researcher")
    assert len(fam.rows(t.runs, t.runs.c.session_id == call.child_session_id)) == 1
    assert len(fam.rows(t.sessions, t.sessions.c.parent_dispatch_id == call.dispatch_id)) == 1
    (wf,) = fam.dbos_workflows(call.dispatch_id)
    assert wf["parent_workflow_id"] == first.run_id  # the first parent run's child, re-attached


def test_a_child_that_cannot_be_found_is_answered_subagent_lost(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS, serve_queue=False)  # nobody serves the queue: children stay enqueued
    handle = rt.start("remote_boss", "tides deep")

    def enqueued(n: int) -> Any:
        calls = rt.session(handle.session_id).calls
        return len(calls) == n and calls[-1].child_session_id and fam.dbos_workflows(calls[-1].dispatch_id) and calls[-1]

    DBOS.cancel_workflow(wait_for("first child", lambda: enqueued(1)).dispatch_id)
    DBOS.delete_workflow(wait_for("second child", lambda: enqueued(2)).dispatch_id)
    result = handle.result(timeout=60)
    assert result.status == "completed"
    cancelled, deleted = rt.session(handle.session_id).calls
    assert cancelled.error["type"] == "subagent_lost" and cancelled.error["cause"] == "workflow_cancelled"
    assert deleted.error["type"] == "subagent_lost" and deleted.error["cause"] == "not_found"
    for call in (cancelled, deleted):
        (run,) = fam.rows(t.runs, t.runs.c.run_id == call.dispatch_id)
        assert run["status"] == "failed" and run["error_code"] == "subagent_lost"
    assert fam.bodies("dig") == []


@pytest.mark.kills
def test_a_child_gated_but_never_enqueued_is_started_once_by_recovery(make_runtime: Any, fam: Family) -> None:
    sid = uuid.uuid4().hex
    crashed = fam.run("start", "--agent", "remote_boss", "--message", "tides", "--session", sid,
                      env={"HELIX_DBOS_CRASH_AT": "child_gated:subagent__researcher"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    (saved,) = fam.rows(t.calls, t.calls.c.session_id == sid)
    assert saved["child_session_id"] and fam.dbos_workflows(saved["dispatch_id"]) == []  # bound, never started
    rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor)  # the relaunch
    result = rt.wait(sid, timeout=60)
    assert result.status == "completed"
    (call,) = rt.session(sid).calls
    assert call.status == "ok" and call.child_session_id == saved["child_session_id"] and len(call.attempts) == 1
    assert len(fam.bodies("dig")) == 1
    _no_request_twice(fam, "researcher")
    assert len(fam.rows(t.sessions, t.sessions.c.parent_dispatch_id == call.dispatch_id)) == 1


# --- local sub-agents ----------------------------------------------------------------------------------


@pytest.mark.kills
def test_local_child_killed_with_its_parent_is_outcome_unknown(make_runtime: Any, fam: Family) -> None:
    sid = uuid.uuid4().hex
    crashed = fam.run("start", "--agent", "local_boss", "--message", "hills", "--session", sid,
                      env={"HELIX_DBOS_CRASH_AT": "after_body:subagent__scout"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    assert len(fam.bodies("peek")) == 1  # the child ran in process, then the process died
    rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor)  # the relaunch
    result = rt.wait(sid, timeout=60)
    assert result.status == "completed"
    (call,) = family.report(rt, result)["calls"]
    assert call["kind"] == "local" and call["status"] == "outcome_unknown" and call["note"] == OUTCOME_UNKNOWN
    assert call["attempts"] == 1 and call["child_session_id"] is None
    assert len(fam.bodies("peek")) == 1  # never run again
    assert OUTCOME_UNKNOWN in result.output  # the model was told it may have run


def test_local_child_runs_inside_the_call_body(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    result = rt.start("local_boss", "hills").result(timeout=60)
    (call,) = rt.session(result.session_id).calls
    assert call.status == "ok" and call.result == "scouted hills" and len(call.attempts) == 1
    (peek,) = fam.bodies("peek")
    assert peek["dispatch_id"] is None  # no dispatch id was minted for the child's own calls


# --- companions ----------------------------------------------------------------------------------------


def test_companion_is_one_session_across_calls_and_parent_turns(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    first = rt.start("pal_boss", "one two three").result(timeout=60)
    assert first.status == "completed" and "pal turn 3: three (remembers one, two)" in first.output
    second = rt.start("pal_boss", "four", session_id=first.session_id).result(timeout=60)
    assert "pal turn 4: four (remembers one, two, three)" in second.output

    calls = rt.session(first.session_id).calls
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == first.session_id)
    pal_sid = comp["companion_session_id"]
    assert {c.child_session_id for c in calls} == {pal_sid}
    assert comp["incarnation"] == 1 and comp["status"] == "live" and comp["first_dispatch_id"] == calls[0].dispatch_id
    assert comp["last_dispatch_id"] == calls[-1].dispatch_id
    (session,) = fam.rows(t.sessions, t.sessions.c.session_id == pal_sid)
    assert session["parent_dispatch_id"] == calls[0].dispatch_id and session["agent_name"] == "pal"
    turns = sorted(fam.rows(t.runs, t.runs.c.session_id == pal_sid), key=lambda r: r["seq"])
    assert [r["run_id"] for r in turns] == [c.dispatch_id for c in calls]  # a turn's run id is its call's dispatch id
    assert [r["entry"] for r in turns] == ["start", "turn", "turn", "turn"]
    (wf,) = fam.dbos_workflows(comp["workflow_id"])
    assert wf["status"] in ("PENDING", "ENQUEUED")  # still alive, waiting for the next turn
    assert _notifications_to(fam, comp["workflow_id"]) == 4
    _no_request_twice(fam, "pal")


def _twice(messages: list[Any]) -> Any:
    if family.steps_in_turn(messages) == 0:
        return [ToolCallPart("subagent__pal", {"message": "red"}, "x1"), ToolCallPart("subagent__pal", {"message": "blue"}, "x2")]
    return "done"


twice_boss = hx.Agent("twice_boss", family.scripted("twice_boss", _twice), sub_agents=[hx.companion_agent(family.pal)])


def test_two_calls_to_one_companion_in_one_reply_are_two_turns(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime([*family.AGENTS, twice_boss])
    result = rt.start("twice_boss", "go").result(timeout=60)
    assert result.status == "completed"
    red, blue = rt.session(result.session_id).calls
    assert red.child_session_id == blue.child_session_id and red.status == blue.status == "ok"
    # parallel calls: the companion takes them one at a time, in whichever order they reached it
    assert sorted([red.result, blue.result]) in (
        ["pal turn 1: red (remembers nothing)", "pal turn 2: blue (remembers red)"],
        ["pal turn 1: blue (remembers nothing)", "pal turn 2: red (remembers blue)"],
    )
    assert len(fam.rows(t.runs, t.runs.c.session_id == red.child_session_id)) == 2


@pytest.mark.kills
def test_companion_survives_a_parent_kill_without_duplicating_a_turn(make_runtime: Any, fam: Family) -> None:
    sid = uuid.uuid4().hex
    fam.hold("two")  # the second turn holds inside the companion's tool
    with fam.worker() as worker:
        parent = fam.spawn("start", "--agent", "pal_boss", "--message", "one two three", "--session", sid, serve=False)
        (ponder,) = wait_for("turn two", lambda: [b for b in fam.bodies("ponder") if b["key"] == "two"])
        assert ponder["pid"] == worker.pid
        parent.kill()
        assert parent.wait(timeout=30) < 0
        fam.release("two")
        rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor, serve_queue=False)  # the relaunch
        result = rt.wait(sid, timeout=60)
    out = family.report(rt, result)
    assert out["status"] == "completed" and "pal turn 3: three (remembers one, two)" in out["output"]
    assert [c["status"] for c in out["calls"]] == ["ok", "ok", "ok"]
    assert sorted(b["key"] for b in fam.bodies("ponder")) == ["one", "three", "two"]  # each turn's work once
    _no_request_twice(fam, "pal")
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == sid)
    turns = fam.rows(t.runs, t.runs.c.session_id == comp["companion_session_id"])
    assert sorted(r["run_id"] for r in turns) == sorted(c["dispatch_id"] for c in out["calls"])
    assert comp["incarnation"] == 1 and _notifications_to(fam, comp["workflow_id"]) == 3  # no turn sent twice


@pytest.mark.kills
def test_companion_and_parent_killed_together_recover_every_turn_once(make_runtime: Any, fam: Family) -> None:
    sid = uuid.uuid4().hex
    crashed = fam.run("start", "--agent", "pal_boss", "--message", "one two", "--session", sid,
                      env={"HELIX_DBOS_CRASH_AT": "child_dispatched:subagent__pal"})  # right after turn one is sent
    assert crashed.code == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor)  # recovers the parent, the companion, the turn
    result = rt.wait(sid, timeout=60)
    assert result.status == "completed" and "pal turn 2: two (remembers one)" in result.output
    assert sorted(b["key"] for b in fam.bodies("ponder")) == ["one", "two"]
    _no_request_twice(fam, "pal")
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == sid)
    assert len(fam.rows(t.runs, t.runs.c.session_id == comp["companion_session_id"])) == 2
    assert _notifications_to(fam, comp["workflow_id"]) == 2


def test_a_resent_turn_is_answered_from_the_ledger(make_runtime: Any, fam: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = make_runtime(family.AGENTS)
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "child_result")  # the parent fails after the turn was answered
    first = rt.start("pal_boss", "one").result(timeout=60)
    assert first.status == "failed"
    (call,) = rt.session(first.session_id).calls
    assert call.status == "outcome_unknown"
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")
    second = rt.retry(first.session_id).result(timeout=60)
    assert second.status == "completed" and "pal turn 1: one (remembers nothing)" in second.output
    (again,) = rt.session(first.session_id).calls
    assert again.status == "ok" and again.dispatch_id == call.dispatch_id and len(again.attempts) == 2
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == first.session_id)
    assert len(fam.rows(t.runs, t.runs.c.session_id == comp["companion_session_id"])) == 1
    assert _notifications_to(fam, comp["workflow_id"]) == 1  # the re-entry found the answer: nothing re-sent
    assert len(fam.bodies("ponder")) == 1
    _no_request_twice(fam, "pal")


def test_an_idle_companion_ends_and_the_next_call_starts_its_next_incarnation(make_runtime: Any, fam: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_DBOS_COMPANION_IDLE_SECONDS", "0.5")
    rt = make_runtime(family.AGENTS)
    first = rt.start("pal_boss", "one").result(timeout=60)
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == first.session_id)
    wait_for("the companion to idle out", lambda: fam.rows(t.companions, t.companions.c.status == "closed")
                 and fam.dbos_workflows(comp["workflow_id"])[0]["status"] == "SUCCESS")
    second = rt.start("pal_boss", "two", session_id=first.session_id).result(timeout=60)
    assert "pal turn 2: two (remembers one)" in second.output  # same session, new incarnation
    (again,) = fam.rows(t.companions, t.companions.c.parent_session_id == first.session_id)
    assert again["companion_session_id"] == comp["companion_session_id"] and again["incarnation"] == 2
    assert again["workflow_id"] != comp["workflow_id"] and again["status"] == "live"


def test_a_stop_of_the_parent_reaches_the_child_it_waits_on(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    fam.hold("tides")
    handle = rt.start("remote_boss", "tides")
    (dig,) = wait_for("the child's tool", lambda: fam.bodies("dig"))
    rt.stop(handle.session_id, kind="interrupt")
    wait_for("the stop to reach the child", lambda: fam.rows(t.stops, t.stops.c.session_id == dig["session"]))
    fam.release("tides")
    result = handle.result(timeout=60)
    assert result.status == "interrupted"
    (call,) = rt.session(handle.session_id).calls
    assert call.status == "error" and call.error["type"] == "subagent_interrupted"
    (child,) = fam.rows(t.runs, t.runs.c.run_id == call.dispatch_id)
    assert child["status"] == "interrupted"
    (stop,) = fam.rows(t.stops, t.stops.c.run_id == call.dispatch_id)
    assert stop["kind"] == "interrupt" and stop["requested_by"] == f"parent run {handle.run_id}"
