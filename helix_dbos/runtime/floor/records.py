"""The records a run's modules pass each other, typed: the reply, the plan, the gate's answers, the outcomes.

A model request ends with a ``Reply`` (``ModelReply``, whose ``planned`` calls are ``PlannedCall``s,
or ``StoppedReply``); the entry's transaction answers an ``EntryPlan``; a saved step is a ``StepRef``
and its calls ``CallBrief``s (ordered into lanes as ``LaneCall``s). The gate (``gate.gate``) answers
one of three types (each with its ``action``): a body (or a child) goes ahead under a committed
attempt (``RunGate``), a reconcile check must be asked first (``ReconcileGate``), or the call is
answered without a body (``DoneGate``); a delegating call's is a ``ChildGate`` holding one. The result write
answers a ``RecordOutcome``, a step commit or a run's end a ``StepOutcome``. A parent waiting on a child
reads a ``ChildOutcome``; a companion's turn begins with a ``TurnBegun``; the API side's entries answer
``OpenedRun``, ``Answered`` or ``StopRequested``, and the entry's prepare hands the first model request
a ``Preread``.

A record is a frozen dataclass (the reply and its planned calls, the entry's plan, the gate's answers,
``ChildGate``, ``StepOutcome``, the result write's ``RecordOutcome``, ``LaneCall``, the others above); one a
workflow records (a ``tx`` output, a model reply, a DBOS step's output, the run workflow's result)
crosses the durable boundary through ``codec.py``, which writes the dict the code recorded before the
record was a dataclass and reads it back, so a run started on
older code recovers on newer. Rows (the
ledger's, ``ledger/records.py``; ``CallBrief``, ``Appended``, ``StepRef``, ``ReplyUsage``) are
``TypedDict``s, plain dicts at runtime recorded as JSON as they are: a replay hands back the same
keys, so a key may be added (as ``NotRequired``), never renamed or dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, final

from ...ledger.records import CheckVerdict, NewCallRow
from ...ledger.statuses import CallKind, CallStatus, EntryKind, PairedBy, ReplayPolicy, RunStatus
from ...ledger.user_json import JsonObject, ToolArgs
from ...recovery.decide import BodyAction
from ...views import StopStatus

#: The gate's answers: a body action of the recovery rules, ``reconcile``, or ``done`` (answered).
GateAction = Literal[BodyAction, "reconcile", "done"]


class ReplyUsage(TypedDict):
    """A model reply's tokens, as the ``usage`` table stores them."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class ReplyRecord:
    """What a model request's record is (``durable.record_reply``): a ``ModelReply``, a
    ``StoppedReply`` or a ``RaisedReply``, told apart by type; ``codec`` reads a recorded one back
    as the one its keys say."""

    __slots__ = ()


@final
@dataclass(frozen=True, slots=True)
class PlannedCall:
    """One call of a model reply as planned (``planning.plan_calls``): recorded with the reply, so a
    replay acts on the plan made before the crash, and saved first as the call's row.

    Its fields are in the order the plan's dict had its keys (``codec`` writes them so); the agent's
    ``review_plan`` hook sees and returns that dict (``codec.planned_dicts``/``planned_calls``)."""

    position: int
    tool_call_id: str
    tool_name: str
    args: ToolArgs
    replay: ReplayPolicy
    concurrency_group: str | None
    sequential: bool
    requires_approval: bool
    transactional: bool
    result: Any
    #: The call's error as the model reads it (``planning``: an invalid call's ``code`` and ``message``).
    error: JsonObject | None
    paired_by: PairedBy | None
    kind: CallKind
    status: CallStatus


@final
@dataclass(frozen=True, slots=True)
class ModelReply(ReplyRecord):
    """A model request's reply as the ledger records it (``durable.record_reply``) before anything
    acts on it: pydantic-ai's ``ModelResponse`` as JSON, its usage and the calls planned from it.

    ``checks``: what the agent's checks on the step (an SDK's guardrails: ``Agent.check_input`` and
    ``check_output``) returned, one JSON object each, recorded with the reply so a replay never runs
    them again."""

    response: JsonObject
    usage: ReplyUsage
    model_name: str | None
    step: int
    planned: tuple[PlannedCall, ...]
    checks: tuple[JsonObject, ...] = ()


@final
@dataclass(frozen=True, slots=True)
class StoppedReply(ReplyRecord):
    """The request read a stop (its kind) instead of asking the model (recorded the same way)."""

    stopped: str


#: What one model request ends with, as the workflow is handed it.
Reply = ModelReply | StoppedReply


@final
@dataclass(frozen=True, slots=True)
class RaisedReply(ReplyRecord):
    """The request raised: the run's ``error_code`` and ``error`` for it (``workflow.failure``),
    recorded as a reply is, so a replay fails the same way without asking the model again."""

    error_code: str
    error: str


#: What ``durable.record_reply`` records for one model request, and a replay reads back.
RecordedReply = ModelReply | StoppedReply | RaisedReply


class StepRef(TypedDict):
    """A saved step: the run that saved its calls, and the step (a run is linear: one reply)."""

    run_id: str
    step: int


@final
@dataclass(frozen=True, slots=True)
class EntryPlan:
    """Where a run starts, as its entry transaction left the ledger (``commits.prepare_entry``):
    at the model, or recovering the saved step ``recover``; ``step`` is the first step it writes."""

    session_id: str
    agent_name: str
    entry: EntryKind
    max_steps: int
    mode: Literal["model", "recover"]
    recover: StepRef | None
    step: int


@final
@dataclass(frozen=True, slots=True)
class Preread:
    """The first model request's read (``model_request.preread``), made by the entry's prepare in its
    own transaction and handed over in memory (``Env.prereads``, by run id), never recorded."""

    step: int
    base: int  # the last message number the read started after (-1: the session read whole)
    stop: str | None
    superseded: int
    #: The active messages after ``base``: (message number, stored body).
    rows: list[tuple[int, Any]]


class CheckRequest(TypedDict):
    """The call a reconcile check is asked about (``reconcile.ask_and_record``); ``attempts`` is the
    attempt the verdict will be about."""

    attempts: int
    args: ToolArgs
    tool_name: str
    session_id: str
    agent_name: str


class CheckTarget(CheckRequest):
    """A started call whose pairing waits for its check (``pairing.checks_to_ask``)."""

    dispatch_id: str


@dataclass(frozen=True, slots=True)
class RunGate:
    """The body goes ahead: its attempt is committed (``action`` says why it may run).

    Built in one place (``gate._goes_ahead``): a first gate and a retried one (finding its own
    attempt) hand the body the same facts, the call's approval among them."""

    action: BodyAction
    attempt: int
    args: ToolArgs
    tool_call_id: str | None
    tool_name: str
    session_id: str
    child_session_id: str | None
    agent_name: str
    transactional: bool
    replay: str
    #: The call's approval (``ToolContext.approved``), also when a retried gate found its own attempt.
    approved: bool | None


@dataclass(frozen=True, slots=True)
class ReconcileGate:
    """Ask the tool's reconcile check (outside the transaction), record its verdict, gate again.
    Its fields are a ``CheckRequest``'s (``check_request``), and why the check is asked."""

    attempts: int
    args: ToolArgs
    tool_name: str
    session_id: str
    agent_name: str
    reason: str
    action: Literal["reconcile"] = "reconcile"

    def check_request(self) -> CheckRequest:
        return {"attempts": self.attempts, "args": self.args, "tool_name": self.tool_name, "session_id": self.session_id, "agent_name": self.agent_name}


@dataclass(frozen=True, slots=True)
class DoneGate:
    """The call is answered (now or before) without a body: ``status`` is its answer;
    ``settled_before``: it was settled before this gate ran (a replay reaching it), nothing happened now."""

    status: CallStatus
    settled_before: bool = False
    action: Literal["done"] = "done"


#: The gate's answer (``gate.gate``), told apart by its type (or its ``action``).
GateOutcome = RunGate | ReconcileGate | DoneGate


@dataclass(frozen=True, slots=True)
class ChildGate:
    """A delegating call's gate (``gate.child_gate``): the gate's answer for the call ``dispatch_id``
    of ``kind``, and what the child phase adds (``children``: ``attach`` and where the child run
    waits; ``companions``: ``attach``, the incarnation it binds the turn to).

    Recorded (the ``helix.delegate`` and ``helix.companion.gate`` transactions' outputs) through
    ``codec``, as the flat dict it was before: the answer's keys, ``dispatch_id``, ``kind`` and the
    child phase's."""

    dispatch_id: str
    kind: CallKind
    answer: GateOutcome
    #: How the child phase reaches the child: remote ``enqueue``/``answered``/``lost``; companion ``send``/``answered``/``await``.
    attach: Literal["enqueue", "send", "answered", "await", "lost"] | None = None
    #: The queue the child run waits on when its agent has ``max_running`` (its entry queue) and that
    #: queue's partition (the parent session's owner); None: the children's queue.
    queue: str | None = None
    partition: str | None = None
    #: A companion's: whether this gate starts its incarnation, its session, its workflow, its idle timeout.
    start: bool | None = None
    companion_session_id: str | None = None
    workflow_id: str | None = None
    idle: float | None = None

    @property
    def action(self) -> GateAction:
        return self.answer.action

    @property
    def attempt(self) -> int:
        """The committed attempt the child (or the turn) runs under: only a gate that goes ahead has one."""
        if not isinstance(self.answer, RunGate):
            raise AssertionError(f"a {self.action!r} child gate has no attempt")
        return self.answer.attempt


@final
@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """The result write's answer: the call's status (``refused`` when the fence refused the write),
    whether this write set it, and why it was refused (``fence.raise_if_refused`` raises it).

    Recorded (the ``helix.delegate_result`` and ``helix.companion.result`` transactions' outputs)
    through ``codec``, as the dict it was: ``status``, ``written``, and ``refused`` when set."""

    status: CallStatus | Literal["refused"]
    written: bool
    refused: str | None = None


@final
@dataclass(frozen=True, slots=True)
class DoneOutcome:
    """A body the gate answered instead: the call's status, nothing written."""

    status: CallStatus


#: What a call's body answers (``bodies.run_body``).
BodyOutcome = RecordOutcome | DoneOutcome


@final
@dataclass(frozen=True, slots=True)
class CheckRecorded:
    """``gate.record_check``: the call's status after the verdict, and whether it was kept."""

    status: CallStatus
    recorded: bool


@dataclass(frozen=True, slots=True)
class LaneCall:
    """A saved call as ``recovery.lanes`` orders it (the pure rules read attributes, not keys)."""

    dispatch_id: str
    run_id: str
    step: int
    position: int
    concurrency_group: str | None
    sequential: bool

    @classmethod
    def of(cls, brief: Mapping[str, Any]) -> LaneCall:
        return cls(brief["dispatch_id"], brief["run_id"], brief["step"], brief["position"], brief["concurrency_group"], brief["sequential"])


class CallBrief(TypedDict):
    """A saved call as the workflow is handed it (``commits.brief``): enough to gate and order it."""

    dispatch_id: str
    run_id: str
    step: int
    position: int
    tool_name: str
    kind: CallKind
    concurrency_group: str | None
    sequential: bool
    status: CallStatus


class Appended(TypedDict):
    """``commits.append_checkpoint``: the saved step and its calls, committed before any body."""

    run_id: str
    step: int
    checkpoint_id: str
    calls: list[CallBrief]


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """A step commit or a run's end: the run's status now (``committed``: the run goes on), the
    run's output when it completed, its error when it failed.

    Recorded (``durable.tx`` outputs, and the run workflow's DBOS result) through ``codec``, as the
    dict it was before it was a dataclass: ``status`` and only the keys it set."""

    status: RunStatus | Literal["committed"]
    output: Any = None
    error_code: str | None = None
    error: str | None = None

    @property
    def goes_on(self) -> bool:
        """The step committed and the run asks the model again (it did not come to rest)."""
        return self.status == "committed"


@final
@dataclass(frozen=True, slots=True)
class OpenedRun:
    """``entries.open_run``: the run an entry admitted, and the entry it was taken as."""

    run_id: str
    session_id: str
    entry: EntryKind
    agent_name: str
    owner: str | None
    #: Enqueued for a worker (in the admitting transaction), not started here.
    queued: bool


@final
@dataclass(frozen=True, slots=True)
class Answered:
    """``entries.answer``: the suspended run, and the calls it still waits on."""

    run_id: str
    all_answered: bool
    remaining: list[str]


@final
@dataclass(frozen=True, slots=True)
class StopRequested:
    """``entries.stop``: whether the run stopped here (it was suspended) and its status or the stop's."""

    run_id: str
    stopped: bool
    status: StopStatus


class ChildOutcome:
    """Where a child run stands as its parent waits (``child_outcome.child_state``): ``ChildDone``,
    ``ChildLost`` or ``ChildWaiting``, told apart by type. Recorded as a DBOS step's output
    (``helix.child_wait``) through ``codec``, as the dict it was before it was a dataclass, whose
    ``state`` key says which."""

    __slots__ = ()


@final
@dataclass(frozen=True, slots=True)
class ChildDone(ChildOutcome):
    """The child run's row is at rest: its status, output and error, and its session."""

    status: RunStatus
    output: Any
    error_code: str | None
    error: str | None
    child_session_id: str


@final
@dataclass(frozen=True, slots=True)
class ChildLost(ChildOutcome):
    """The child can no longer finish (``cause``: why, as ``subagent_lost`` reports it)."""

    cause: str
    message: str


@final
@dataclass(frozen=True, slots=True)
class ChildWaiting(ChildOutcome):
    """The child may still finish: the parent waits another slice."""


@final
@dataclass(frozen=True, slots=True)
class TurnBegun:
    """``companions._begin_turn``: run the turn, await the run a duplicate began, or it is answered or
    no longer needed; ``queue``/``partition``: the companion agent's entry queue when it has
    ``max_running`` (``children.placement``), both None otherwise. Recorded (``helix.companion.begin``)
    through ``codec`` as the dict it was before it was a dataclass."""

    action: Literal["run", "await", "answered", "dropped"]
    queue: str | None = None
    partition: str | None = None


__all__ = [
    "Answered",
    "Appended",
    "BodyOutcome",
    "CallBrief",
    "CheckRecorded",
    "CheckRequest",
    "CheckTarget",
    "CheckVerdict",
    "ChildDone",
    "ChildGate",
    "ChildLost",
    "ChildOutcome",
    "ChildWaiting",
    "DoneGate",
    "DoneOutcome",
    "EntryPlan",
    "GateAction",
    "GateOutcome",
    "ModelReply",
    "NewCallRow",
    "OpenedRun",
    "PlannedCall",
    "Preread",
    "RaisedReply",
    "ReconcileGate",
    "RecordOutcome",
    "RecordedReply",
    "Reply",
    "ReplyRecord",
    "RunGate",
    "StepOutcome",
    "StopRequested",
    "StoppedReply",
    "TurnBegun",
]
