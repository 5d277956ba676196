"""A run recorded before a deploy replays after it: the records the code wrote as plain dicts (before
they were dataclasses) decode through ``runtime/floor/codec.py``, and encode back to the same dict.

The fixtures are frozen copies of what runs recorded at 50963da (the last commit before the records
became dataclasses), taken from the ``tx_outputs`` and DBOS ``operation_outputs`` rows of
test_core_run, test_stop, test_approvals and test_subagents on both databases: one of each shape
(key set) seen. Never edit them to fit new code: a record a past version wrote stays as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.ledger.escape import escape_json, unescape_json
from helix_dbos.runtime.floor import codec
from helix_dbos.runtime.floor.records import (
    ChildDone,
    ChildGate,
    ChildLost,
    ChildOutcome,
    ChildWaiting,
    DoneGate,
    EntryPlan,
    ModelReply,
    PlannedCall,
    RaisedReply,
    RecordOutcome,
    ReplyRecord,
    RunGate,
    StepOutcome,
    StoppedReply,
    TurnBegun,
)

#: ``helix.commit``, ``helix.fail``, ``helix.stop`` outputs, and the run workflow's DBOS result.
STEP_OUTCOMES: list[dict[str, Any]] = [
    {"status": "committed"},
    {"output": "hello", "status": "completed"},
    {"status": "completed", "output": None},
    {"status": "completed", "output": {"city": "Paris", "n": 3}},
    {"status": "failed", "error_code": "max_steps", "error": "the run used its 2 model requests (max_steps) without finishing"},
    {"status": "failed"},
    {"status": "interrupted"},
    {"status": "suspended_client_tool"},
]


@pytest.mark.parametrize("recorded", STEP_OUTCOMES, ids=lambda r: "-".join(sorted(r)) + f"-{r['status']}")
def test_a_recorded_step_outcome_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    outcome = codec.decode(StepOutcome, recorded)
    assert isinstance(outcome, StepOutcome)
    assert outcome.status == recorded["status"]
    assert outcome.output == recorded.get("output") and outcome.error == recorded.get("error")
    assert outcome.goes_on is (recorded["status"] == "committed")
    assert codec.encode(outcome) == recorded  # what this version records is what the last one did


def test_a_record_of_the_wrong_shape_is_a_typed_error() -> None:
    with pytest.raises(codec.RecordShapeError):
        codec.decode(StepOutcome, ["committed"])
    with pytest.raises(codec.RecordShapeError):
        codec.decode(StepOutcome, {"output": 1})


def test_rows_pass_through_the_codec_as_they_are() -> None:
    """Ledger rows (``TypedDict``s) and plain values are recorded as they are (``durable.tx`` tells a
    record that needs decoding from one that does not by whether ``encode`` changed it)."""
    rows = [{"dispatch_id": "d", "status": "saved"}]
    assert codec.encode(rows) is rows
    assert codec.encode("x") == "x" and codec.encode(None) is None
    assert codec.encode([StepOutcome("committed")]) == [{"status": "committed"}]


_RUN = {"action": "run", "attempt": 1, "args": {"message": "one"}, "tool_call_id": "d0", "tool_name": "subagent__pal",
        "session_id": "ece06f4d518742e198c10c507f5f263a", "child_session_id": None, "agent_name": "pal_boss", "transactional": False,
        "replay": "unsafe", "approved": None}

#: ``helix.delegate`` and ``helix.companion.gate`` outputs: the two recorded by real runs, then one of each
#: other shape the builders of 50963da wrote (``children._remote_gate``, ``companions._parent_gate``,
#: ``child_outcome.unavailable``, ``gate.child_gate``), built by hand from that code.
CHILD_GATES: list[dict[str, Any]] = [
    {**_RUN, "dispatch_id": "fdaa81c8cba04f248ec50a078c41cc3a", "kind": "companion", "attach": "send", "start": True,
     "companion_session_id": "da1eec46b3214f33b1b2ec6b777f6b6b", "workflow_id": "companion-da1eec46b3214f33b1b2ec6b777f6b6b-1", "idle": 86400.0},
    {"action": "reattach", "attempt": 1, "args": {"message": "tides"}, "tool_call_id": "d0", "tool_name": "subagent__researcher",
     "session_id": "547129bef1b841adaed97e4f1d9a1698", "child_session_id": "f89abe7ab1cd44a8a76773b2fe777266", "agent_name": "remote_boss",
     "transactional": False, "replay": "unsafe", "approved": None, "dispatch_id": "5a48a3891bc64c8fbf93bcd9112d2883", "kind": "remote", "attach": "enqueue"},
    {**_RUN, "child_session_id": "c1", "dispatch_id": "d1", "kind": "remote", "queue": "helix.agent.pal", "partition": "alice", "attach": "enqueue"},
    {**_RUN, "action": "run_again", "approved": True, "dispatch_id": "d1", "kind": "remote", "attach": "answered"},
    {**_RUN, "action": "reenter", "dispatch_id": "d1", "kind": "remote", "attach": "lost"},
    {**_RUN, "dispatch_id": "d1", "kind": "companion", "attach": "await", "start": False, "companion_session_id": "c1",
     "workflow_id": "companion-c1-2", "idle": 30.0},
    {"action": "done", "status": "ok", "settled_before": True, "dispatch_id": "d1", "kind": "remote"},
    {"action": "done", "status": "run_stopped", "dispatch_id": "d1", "kind": "companion"},
]

#: ``child_outcome.unavailable``: the gate that went ahead, its action turned "done" (the call was answered "error").
UNAVAILABLE: dict[str, Any] = {**_RUN, "dispatch_id": "d1", "kind": "remote", "action": "done"}


@pytest.mark.parametrize("recorded", CHILD_GATES, ids=lambda r: f"{r['kind']}-{r['action']}-{r.get('attach')}")
def test_a_recorded_child_gate_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    gate = codec.decode(ChildGate, recorded)
    assert isinstance(gate, ChildGate) and gate.action == recorded["action"] and gate.dispatch_id == recorded["dispatch_id"]
    if recorded["action"] != "done":
        assert isinstance(gate.answer, RunGate) and gate.attempt == recorded["attempt"] and gate.answer.approved == recorded["approved"]
    assert codec.encode(gate) == recorded


def test_a_child_gate_recorded_for_a_removed_sub_agent_decodes_as_answered() -> None:
    gate = codec.decode(ChildGate, UNAVAILABLE)
    assert gate.answer == DoneGate("error") and gate.kind == "remote"


def test_a_child_gate_without_its_keys_is_a_typed_error() -> None:
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ChildGate, {"action": "run", "dispatch_id": "d1", "kind": "remote"})
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ChildGate, {**_RUN, "action": "jump", "dispatch_id": "d1", "kind": "remote"})


# --- the reply, its planned calls, the entry's plan -------------------------------------------------

#: What runs recorded at a4450de (the last commit before the reply, the plan and a planned call were
#: dataclasses): ``helix.reply`` and ``helix.prepare`` outputs read back from ``tx_outputs`` after their
#: insert, on each database, and the live model step's output as DBOS recorded it (escaped), one of
#: each shape seen in test_core_run, test_stop, test_approvals, test_subagents, test_live_output,
#: test_pydantic_features, test_client_tools and test_odd_values.
RECORDED = json.loads((Path(__file__).resolve().parents[1] / "recorded" / "replies_plans_a4450de.json").read_text())


def _as_stored(value: object, db: str | None) -> str:
    """The record's JSON text as the database keeps it: SQLite (and DBOS) the text as written, key
    order included; Postgres ``JSONB``, whose text does not depend on the order keys were written in."""
    return json.dumps(value, sort_keys=db == "postgresql")


def _id(r: dict[str, Any]) -> str:
    v = r["recorded"]
    what = next((k for k in ("raised", "stopped", "mode") if k in v), "reply")
    if what == "reply":
        what += "-" + "+".join(sorted({f"{p['kind']}.{p['status']}" for p in v["planned"]})) if v["planned"] else "-text"
    elif what == "mode":
        what = f"{v['mode']}-{v['entry']}"
    return f"{r['db'] or 'dbos'}-{what}"


@pytest.mark.parametrize("r", RECORDED["tx.helix.reply"], ids=_id)
def test_a_recorded_model_reply_decodes_and_encodes_back_the_same(r: dict[str, Any]) -> None:
    recorded = r["recorded"]
    reply = codec.decode(ReplyRecord, recorded)
    if "raised" in recorded:
        assert isinstance(reply, RaisedReply) and [reply.error_code, reply.error] == recorded["raised"]
    elif "stopped" in recorded:
        assert reply == StoppedReply(recorded["stopped"])
    else:
        assert isinstance(reply, ModelReply) and reply.step == recorded["step"]
        assert all(isinstance(p, PlannedCall) for p in reply.planned) and len(reply.planned) == len(recorded["planned"])
        # the agent's ``review_plan`` hook sees the plan's dicts as they were recorded
        assert codec.planned_dicts(reply.planned) == recorded["planned"]
    assert _as_stored(codec.encode(reply), r["db"]) == _as_stored(recorded, r["db"])


@pytest.mark.parametrize("r", RECORDED["step"], ids=_id)
def test_a_live_model_reply_dbos_recorded_decodes_and_encodes_back_the_same(r: dict[str, Any]) -> None:
    """With live output the reply is a DBOS step's output, escaped (``durable.step``)."""
    reply = codec.decode(ReplyRecord, unescape_json(r["recorded"]))
    assert isinstance(reply, ModelReply)
    assert json.dumps(escape_json(codec.encode(reply))) == json.dumps(r["recorded"])


@pytest.mark.parametrize("r", RECORDED["tx.helix.prepare"], ids=_id)
def test_a_recorded_entry_plan_decodes_and_encodes_back_the_same(r: dict[str, Any]) -> None:
    recorded = r["recorded"]
    plan = codec.decode(EntryPlan, recorded)
    assert isinstance(plan, EntryPlan) and plan.mode == recorded["mode"] and plan.step == recorded["step"]
    assert (plan.recover is None) is (plan.mode == "model")
    assert _as_stored(codec.encode(plan), r["db"]) == _as_stored(recorded, r["db"])


def test_the_fixtures_hold_every_kind_of_reply_on_both_databases() -> None:
    """The captured shapes cover what the round trips above claim: both databases, each kind of record."""
    for db in ("sqlite", "postgresql"):
        replies = [r["recorded"] for r in RECORDED["tx.helix.reply"] if r["db"] == db]
        assert any("raised" in v for v in replies) and any("stopped" in v for v in replies)
        kinds = {p["kind"] for v in replies for p in v.get("planned", ())}
        assert {"tool", "client", "finish", "invalid", "local", "remote", "companion"} <= kinds
        assert {p["mode"] for p in (r["recorded"] for r in RECORDED["tx.helix.prepare"] if r["db"] == db)} == {"model", "recover"}


def test_a_reply_or_plan_of_the_wrong_shape_is_a_typed_error() -> None:
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ReplyRecord, {"response": {}, "usage": {}})
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ReplyRecord, {"raised": ["only_a_code"]})
    with pytest.raises(codec.RecordShapeError):
        codec.decode(EntryPlan, {"session_id": "s", "mode": "model"})
    with pytest.raises(codec.RecordShapeError):  # a ``review_plan`` hook that dropped a key
        codec.planned_calls([{"position": 0, "tool_name": "t"}])


#: ``helix.delegate_result`` and ``helix.companion.result`` outputs (``RecordOutcome``): the shapes
#: test_subagents recorded at a4450de, the same on both databases, then the two other shapes
#: a4450de's ``gate.record`` wrote, built by hand from that code (a refused write; a call answered before).
RECORD_OUTCOMES: list[dict[str, Any]] = [
    {"status": "ok", "written": True},
    {"status": "error", "written": True},
    {"status": "refused", "written": False, "refused": "result write refused: the run is no longer the session's active run"},
    {"status": "ok", "written": False},
]


@pytest.mark.parametrize("recorded", RECORD_OUTCOMES, ids=lambda r: f"{r['status']}-{r['written']}")
def test_a_recorded_result_write_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    outcome = codec.decode(RecordOutcome, recorded)
    assert isinstance(outcome, RecordOutcome) and outcome.written is recorded["written"] and outcome.refused == recorded.get("refused")
    assert json.dumps(codec.encode(outcome)) == json.dumps(recorded)
    with pytest.raises(codec.RecordShapeError):
        codec.decode(RecordOutcome, {"status": "ok"})


# --- a child's outcome, a companion's turn -----------------------------------------------------------

#: ``helix.child_wait`` outputs (a DBOS step's, ``child_outcome.child_state``) as a0547af wrote them (the
#: last commit before they were dataclasses), built by hand from that code: a child at rest, each
#: loss, still waiting.
CHILD_OUTCOMES: list[dict[str, Any]] = [
    {"state": "done", "status": "completed", "output": "hi from the child", "error_code": None, "error": None, "child_session_id": "c1"},
    {"state": "done", "status": "completed", "output": {"city": "Paris"}, "error_code": None, "error": None, "child_session_id": "c1"},
    {"state": "done", "status": "failed", "output": None, "error_code": "max_steps", "error": "no steps left", "child_session_id": "c1"},
    {"state": "lost", "cause": "workflow_cancelled", "message": "the sub-agent's workflow ended CANCELLED without an outcome"},
    {"state": "lost", "cause": "not_found", "message": "the sub-agent's workflow cannot be found"},
    {"state": "lost", "cause": "companion_gone", "message": "the companion's workflow ended (not found) before it took this turn"},
    {"state": "waiting"},
]


@pytest.mark.parametrize("recorded", CHILD_OUTCOMES, ids=lambda r: f"{r['state']}-{r.get('status') or r.get('cause') or ''}")
def test_a_recorded_child_outcome_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    outcome = codec.decode(ChildOutcome, recorded)
    kind = {"done": ChildDone, "lost": ChildLost, "waiting": ChildWaiting}[recorded["state"]]
    assert isinstance(outcome, kind)
    assert json.dumps(codec.encode(outcome)) == json.dumps(recorded)  # the same keys, in the same order
    assert codec.decode(ChildOutcome, unescape_json(escape_json(codec.encode(outcome)))) == outcome  # as DBOS records it, escaped


def test_a_child_outcome_of_the_wrong_shape_is_a_typed_error() -> None:
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ChildOutcome, {"state": "done", "status": "completed"})
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ChildOutcome, {"state": "gone"})
    with pytest.raises(codec.RecordShapeError):
        codec.decode(ChildOutcome, ["waiting"])


#: ``helix.companion.begin`` outputs (``companions._begin_turn``) as a0547af wrote them, built by hand
#: from that code: each action, on the children's queue (no ``queue``) and on a limited agent's own.
TURNS_BEGUN: list[dict[str, Any]] = [
    {"action": "run"},
    {"action": "run", "queue": "helix_entries.pal", "partition": "alice"},
    {"action": "await"},
    {"action": "await", "queue": "helix_entries.pal", "partition": "alice"},
    {"action": "answered"},
    {"action": "dropped"},
]


@pytest.mark.parametrize("recorded", TURNS_BEGUN, ids=lambda r: f"{r['action']}-{'queue' in r}")
def test_a_recorded_turn_begun_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    begun = codec.decode(TurnBegun, recorded)
    assert isinstance(begun, TurnBegun) and begun.action == recorded["action"] and begun.queue == recorded.get("queue")
    assert json.dumps(codec.encode(begun)) == json.dumps(recorded)
    with pytest.raises(codec.RecordShapeError):
        codec.decode(TurnBegun, {"queue": "q"})
