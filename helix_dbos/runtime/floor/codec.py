"""The one door a run's records cross the durable boundary by: a record to plain JSON and back.

A run records some of its records: a ledger transaction's output (``durable.tx``, the
``tx_outputs`` row a replay hands back) and the run workflow's result (DBOS's, with helix's portable
JSON serializer). The workflow code passes frozen dataclasses (``records.py``); what is recorded is
JSON, so every such record goes out through ``encode`` and comes back through ``decode``, here and
nowhere else.

What a record encodes to is the dict the code wrote before the record was a dataclass, key for key,
and decoding reads that shape: a run recorded by an older version replays on a newer one after a
deploy (a workflow recovered mid-run reads its recorded outputs back). A field may be added (decoded
with its default when an old record lacks it), never renamed or dropped.

Records that are rows (``ledger/records.py``, ``CallBrief``, ``Appended``, ``StepRef``) stay
``TypedDict``s, plain dicts at runtime, and pass through ``encode`` and ``decode`` unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from ...errors import HelixError
from ...ledger.user_json import JsonObject
from .records import (
    ChildDone,
    ChildGate,
    ChildLost,
    ChildOutcome,
    ChildWaiting,
    DoneGate,
    EntryPlan,
    GateOutcome,
    ModelReply,
    PlannedCall,
    RaisedReply,
    ReconcileGate,
    RecordOutcome,
    ReplyRecord,
    RunGate,
    StepOutcome,
    StoppedReply,
    TurnBegun,
)

R = TypeVar("R")


class RecordShapeError(HelixError, ValueError):
    """A recorded value does not have the shape of the record it is read back as (a record written
    by code this version cannot read, or a corrupted ``tx_outputs`` row)."""

    code = "record_shape"


def _mapping(kind: type[Any], data: object) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise RecordShapeError(f"a recorded {kind.__name__} is a JSON object, not {type(data).__name__}: {data!r:.200}")
    return data


# --- StepOutcome --------------------------------------------------------------------------------


def _encode_step_outcome(o: StepOutcome) -> JsonObject:
    out: JsonObject = {"status": o.status}
    if o.status == "completed" or o.output is not None:  # a completed run's output, None included
        out["output"] = o.output
    if o.error_code is not None:
        out["error_code"] = o.error_code
    if o.error is not None:
        out["error"] = o.error
    return out


def _decode_step_outcome(data: object) -> StepOutcome:
    d = _mapping(StepOutcome, data)
    if "status" not in d:
        raise RecordShapeError(f"a recorded StepOutcome has a status: {dict(d)!r:.200}")
    return StepOutcome(d["status"], d.get("output"), d.get("error_code"), d.get("error"))


# --- ChildGate ------------------------------------------------------------------------------------

#: A child gate's keys past its answer's, in the order the code wrote them (None: not written).
_CHILD_PHASE: Final = ("attach", "queue", "partition", "start", "companion_session_id", "workflow_id", "idle")


def _encode_answer(a: GateOutcome) -> JsonObject:
    if isinstance(a, RunGate):
        return {"action": a.action, "attempt": a.attempt, "args": a.args, "tool_call_id": a.tool_call_id, "tool_name": a.tool_name,
                "session_id": a.session_id, "child_session_id": a.child_session_id, "agent_name": a.agent_name,
                "transactional": a.transactional, "replay": a.replay, "approved": a.approved}
    if isinstance(a, ReconcileGate):
        return {"action": a.action, "attempts": a.attempts, "args": a.args, "tool_name": a.tool_name, "session_id": a.session_id,
                "agent_name": a.agent_name, "reason": a.reason}
    return {"action": a.action, "status": a.status, **({"settled_before": True} if a.settled_before else {})}


def _decode_answer(d: Mapping[str, Any]) -> GateOutcome:
    action = d.get("action")
    if action == "done":
        # A sub-agent removed before its child started (``child_outcome.unavailable``) was recorded
        # as the gate that went ahead with its action turned "done" and no status: the call was
        # answered "error" in that transaction.
        return DoneGate(d.get("status", "error"), settled_before=bool(d.get("settled_before", False)))
    if action == "reconcile":
        return ReconcileGate(d["attempts"], d["args"], d["tool_name"], d["session_id"], d["agent_name"], d["reason"])
    if action not in ("run", "run_again", "reattach", "reenter"):
        raise RecordShapeError(f"a recorded gate's action is one of the gate's answers, not {action!r}")
    return RunGate(action, d["attempt"], d["args"], d["tool_call_id"], d["tool_name"], d["session_id"], d["child_session_id"],
                   d["agent_name"], d["transactional"], d["replay"], d.get("approved"))


def _encode_child_gate(g: ChildGate) -> JsonObject:
    out = _encode_answer(g.answer)
    out.update(dispatch_id=g.dispatch_id, kind=g.kind)
    out.update({k: getattr(g, k) for k in _CHILD_PHASE if getattr(g, k) is not None})
    return out


def _decode_child_gate(data: object) -> ChildGate:
    d = _mapping(ChildGate, data)
    try:
        return ChildGate(d["dispatch_id"], d["kind"], _decode_answer(d), **{k: d[k] for k in _CHILD_PHASE if k in d})
    except KeyError as missing:
        raise RecordShapeError(f"a recorded ChildGate lacks {missing}: {dict(d)!r:.300}") from None


# --- the reply, its planned calls, the entry's plan ----------------------------------------------

#: A planned call's keys, in the order the plan's dict had them (the dataclass's fields).
_PLANNED: Final = tuple(f.name for f in dataclasses.fields(PlannedCall))


def _encode_planned(p: PlannedCall) -> JsonObject:
    return {k: getattr(p, k) for k in _PLANNED}


def _decode_planned(data: object) -> PlannedCall:
    d = _mapping(PlannedCall, data)
    try:
        # ``transactional`` was read with ``.get`` by the code that saved the call: a plan without it is not one
        return PlannedCall(**{k: d[k] for k in _PLANNED if k != "transactional"}, transactional=bool(d.get("transactional", False)))
    except KeyError as missing:
        raise RecordShapeError(f"a recorded PlannedCall lacks {missing}: {dict(d)!r:.300}") from None


def planned_dicts(planned: Sequence[PlannedCall]) -> list[JsonObject]:
    """The plan as the agent's ``review_plan`` hook sees it (public API): one plain dict per call,
    the keys a recorded plan has."""
    return [_encode_planned(p) for p in planned]


def planned_calls(planned: Sequence[object]) -> tuple[PlannedCall, ...]:
    """What ``review_plan`` handed back, as the plan: each dict read as a recorded call is
    (``RecordShapeError`` for one that lost a key)."""
    return tuple(decode(PlannedCall, p) for p in planned)


def _encode_model_reply(r: ModelReply) -> JsonObject:
    out: JsonObject = {"response": r.response, "usage": r.usage, "model_name": r.model_name, "step": r.step, "planned": planned_dicts(r.planned)}
    if r.checks:  # a reply without checks is recorded as it was before checks existed
        out["checks"] = list(r.checks)
    return out


def _decode_reply(data: object) -> ReplyRecord:
    """A recorded model request: the failure it raised, the stop it read, or the reply (by its keys)."""
    d = _mapping(ReplyRecord, data)
    try:
        if "raised" in d:
            code, error = d["raised"]
            return RaisedReply(code, error)
        if "stopped" in d:
            return StoppedReply(d["stopped"])
        checks = tuple(_mapping(ModelReply, c) for c in d.get("checks") or ())
        return ModelReply(d["response"], d["usage"], d["model_name"], d["step"], planned_calls(d["planned"]), cast(tuple[JsonObject, ...], checks))
    except (KeyError, TypeError, ValueError) as bad:
        raise RecordShapeError(f"a recorded model reply has not a reply's shape ({bad!r}): {dict(d)!r:.300}") from None


def _decode_entry_plan(data: object) -> EntryPlan:
    d = _mapping(EntryPlan, data)
    try:
        return EntryPlan(d["session_id"], d["agent_name"], d["entry"], d["max_steps"], d["mode"], d["recover"], d["step"])
    except KeyError as missing:
        raise RecordShapeError(f"a recorded EntryPlan lacks {missing}: {dict(d)!r:.300}") from None


def _encode_entry_plan(p: EntryPlan) -> JsonObject:
    return {"session_id": p.session_id, "agent_name": p.agent_name, "entry": p.entry, "max_steps": p.max_steps, "mode": p.mode,
            "recover": p.recover, "step": p.step}


# --- RecordOutcome -----------------------------------------------------------------------------


def _encode_record_outcome(o: RecordOutcome) -> JsonObject:
    out: JsonObject = {"status": o.status, "written": o.written}
    if o.refused is not None:
        out["refused"] = o.refused
    return out


def _decode_record_outcome(data: object) -> RecordOutcome:
    d = _mapping(RecordOutcome, data)
    try:
        return RecordOutcome(d["status"], d["written"], d.get("refused"))
    except KeyError as missing:
        raise RecordShapeError(f"a recorded RecordOutcome lacks {missing}: {dict(d)!r:.300}") from None


# --- a child's outcome, a companion's turn --------------------------------------------------------


def _encode_child_outcome(o: ChildOutcome) -> JsonObject:
    if isinstance(o, ChildDone):
        return {"state": "done", "status": o.status, "output": o.output, "error_code": o.error_code, "error": o.error,
                "child_session_id": o.child_session_id}
    if isinstance(o, ChildLost):
        return {"state": "lost", "cause": o.cause, "message": o.message}
    return {"state": "waiting"}


def _decode_child_outcome(data: object) -> ChildOutcome:
    d = _mapping(ChildOutcome, data)
    try:
        state = d["state"]
        if state == "done":
            return ChildDone(d["status"], d["output"], d["error_code"], d["error"], d["child_session_id"])
        if state == "lost":
            return ChildLost(d["cause"], d["message"])
    except KeyError as missing:
        raise RecordShapeError(f"a recorded child outcome lacks {missing}: {dict(d)!r:.300}") from None
    if state != "waiting":
        raise RecordShapeError(f"a recorded child outcome's state is done, lost or waiting, not {state!r}")
    return ChildWaiting()


def _encode_turn_begun(t: TurnBegun) -> JsonObject:
    out: JsonObject = {"action": t.action}
    if t.queue is not None:
        out.update(queue=t.queue, partition=t.partition)
    return out


def _decode_turn_begun(data: object) -> TurnBegun:
    d = _mapping(TurnBegun, data)
    if d.get("action") not in ("run", "await", "answered", "dropped"):
        raise RecordShapeError(f"a recorded TurnBegun's action is run, await, answered or dropped: {dict(d)!r:.300}")
    return TurnBegun(d["action"], d.get("queue"), d.get("partition"))


# --- the table ----------------------------------------------------------------------------------

_ENCODERS: Final[dict[type[Any], Callable[[Any], object]]] = {
    StepOutcome: _encode_step_outcome,
    ChildGate: _encode_child_gate,
    PlannedCall: _encode_planned,
    ModelReply: _encode_model_reply,
    StoppedReply: lambda r: {"stopped": r.stopped},
    RaisedReply: lambda r: {"raised": [r.error_code, r.error]},
    EntryPlan: _encode_entry_plan,
    RecordOutcome: _encode_record_outcome,
    ChildDone: _encode_child_outcome,
    ChildLost: _encode_child_outcome,
    ChildWaiting: _encode_child_outcome,
    TurnBegun: _encode_turn_begun,
}
_DECODERS: Final[dict[type[Any], Callable[[object], Any]]] = {
    StepOutcome: _decode_step_outcome,
    ChildGate: _decode_child_gate,
    PlannedCall: _decode_planned,
    ReplyRecord: _decode_reply,
    EntryPlan: _decode_entry_plan,
    RecordOutcome: _decode_record_outcome,
    ChildOutcome: _decode_child_outcome,
    TurnBegun: _decode_turn_begun,
}


def encode(value: R) -> object:
    """``value`` as plain JSON-able data: a record of this module's table as the dict its shape
    is recorded as, a list of values each encoded, anything else (a ledger row, a string) as it is."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    if isinstance(value, list):
        items = [encode(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def decode(kind: type[R], data: object) -> R:
    """``data`` (what ``encode`` gave, or what the code before this record was a dataclass recorded)
    as a ``kind``; ``RecordShapeError`` when it has not that shape. ``ReplyRecord`` reads a model
    request's record as the reply, stop or failure its keys say, ``ChildOutcome`` a child's as the
    done, lost or waiting its ``state`` says."""
    if isinstance(data, kind):
        return data
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise TypeError(f"{kind.__name__} is not a record the codec knows")
    return cast(R, decoder(data))


def decoder(kind: type[R]) -> Callable[[object], R]:
    """``decode`` bound to ``kind``: how ``durable.tx`` is told what its output reads back as."""
    return lambda data: decode(kind, data)


__all__ = ["RecordShapeError", "decode", "decoder", "encode", "planned_calls", "planned_dicts"]
