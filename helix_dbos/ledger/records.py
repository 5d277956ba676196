"""The ledger's rows as its query modules return them: one ``TypedDict`` per table (or per query shape).

What passes between the workflow's ledger transactions, the attempt gate and recovery is a row of
these tables, and the type says exactly which keys it holds and which words its status and kind
columns may carry (the Literals of ``statuses.py``, never spelled again here). At runtime a row stays
the plain ``dict`` that ``rows.fetch_one`` builds from a ``SELECT``: SQL reads, the JSON a
transaction records as its output and every caller's subscripting are unchanged; the types are for
the checker and the reader only. Fields follow the columns of ``tables.py``, in the same order
(``CallRow``'s after the ``NewCallRow`` it extends); a key is ``NotRequired`` only where a row really lacks it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict

from .statuses import (
    AttemptOutcome,
    CallKind,
    CallStatus,
    CheckpointKind,
    CompanionStatus,
    DecidedBy,
    EntryKind,
    MessageKind,
    PairedBy,
    ReplayPolicy,
    RunStatus,
    SessionStatus,
    StopKind,
    Verdict,
)


class SessionRow(TypedDict):
    """``sessions``: one conversation; its version is the run-start gate's compare-and-set."""

    session_id: str
    agent_name: str
    status: SessionStatus
    current_run_id: str | None
    version: int
    event_seq: int
    run_count: int
    parent_dispatch_id: str | None
    created_at: datetime
    updated_at: datetime
    owner: str | None


class RunRow(TypedDict):
    """``runs``: one run of a session (its id is its DBOS workflow's id)."""

    run_id: str
    session_id: str
    seq: int
    agent_name: str
    entry: EntryKind
    entry_message: str | None
    checkpoint_id: str | None
    previous_run_id: str | None
    status: RunStatus
    error_code: str | None
    error: str | None
    output: Any
    steps: int
    max_steps: int
    recovery: str  # the recovery profile ("full" or "dbos_compat", ``recovery.Profile``)
    executor_id: str | None
    created_at: datetime
    ended_at: datetime | None
    started_at: datetime | None


class FenceRow(RunRow):
    """The run's row as the run fence reads it (``fence.check``), with what nearly every run
    transaction needs next: the run's stop record and, inside a workflow, DBOS's status of it."""

    stop_kind: StopKind | None
    #: DBOS's status of the run's workflow (for a cancel); read only when the fence runs in a workflow.
    dbos_status: NotRequired[str | None]


class EndedRun(TypedDict):
    """What ``runs.end_run`` returns: the ended run and its session."""

    run_id: str
    session_id: str


class MessageRow(TypedDict):
    """An active transcript message as ``messages.active_messages`` selects it (``body``: pydantic-ai's JSON)."""

    seq: int
    kind: MessageKind
    body: Any
    run_id: str
    step: int | None


class CheckpointRow(TypedDict):
    """``checkpoints``: a pointer into the transcript (every message with ``seq < message_seq``)."""

    checkpoint_id: str
    session_id: str
    run_id: str
    step: int
    kind: CheckpointKind
    message_seq: int
    superseded_by: str | None
    created_at: datetime


class CheckVerdict(TypedDict):
    """What a reconcile check answered (``reconcile.ask``): ``result`` with ``applied``, ``reason`` with ``unknown``."""

    verdict: Verdict
    result: NotRequired[Any]
    reason: NotRequired[str]


class CheckOutcome(CheckVerdict):
    """``calls.check_outcome``: the verdict, the attempt it is about, and when it was recorded (ISO time)."""

    attempt: int
    at: str


class NewCallRow(TypedDict):
    """A call as the save-first record inserts it (``commits.append_checkpoint``, or a step
    committed without saving first): the ``calls`` columns the planner gives, with the fresh
    dispatch id the call keeps for life. ``CallRow`` is this and the columns the database fills."""

    dispatch_id: str
    session_id: str
    run_id: str
    checkpoint_id: str
    step: int
    position: int
    tool_call_id: str | None
    tool_name: str
    kind: CallKind
    args: Any
    replay: ReplayPolicy
    concurrency_group: str | None
    sequential: bool
    requires_approval: bool
    status: CallStatus
    result: Any
    error: Any
    paired_by: PairedBy | None
    settled_run_id: str | None
    transactional: bool


class CallRow(NewCallRow):
    """``calls``: one tool call the model made, saved before any body, with its policy and its answer
    (``NewCallRow``'s columns, and these)."""

    attempts: int
    outcome_note: str | None
    approved: bool | None
    approval_reason: str | None
    approval_actor: str | None
    answered_at: datetime | None
    child_session_id: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    decided_by: DecidedBy | None
    #: A ``CheckOutcome`` when written by helix_dbos; typed as the JSON it is stored as, since the
    #: service returns it as stored (a narrower type would drop keys a check's verdict added).
    check_outcome: dict[str, Any] | None
    #: Read beside the row by the reads recovery decides over (``tx_marks.escaped_column``): a
    #: transactional body of the call committed its transaction itself. Not a column of ``calls``.
    tx_escaped: NotRequired[bool]


class AttemptRow(TypedDict):
    """``attempts``: one body start of a call, committed before the body runs."""

    dispatch_id: str
    attempt: int
    run_id: str
    executor_id: str | None
    started_at: datetime
    ended_at: datetime | None
    outcome: AttemptOutcome | None
    token: str | None


class EventRow(TypedDict):
    """``events``: one ledger event, committed with the change it reports."""

    session_id: str
    seq: int
    run_id: str | None
    type: str
    data: dict[str, Any]
    created_at: datetime


class CompanionRow(TypedDict):
    """``companions``: a persistent companion's session and its live (or last) incarnation."""

    companion_session_id: str
    parent_session_id: str
    agent_name: str
    tool_name: str
    incarnation: int
    workflow_id: str
    status: CompanionStatus
    first_dispatch_id: str
    last_dispatch_id: NotRequired[str | None]  # a row read back has it; the first insert leaves it out
    created_at: datetime
    updated_at: datetime


__all__ = [
    "AttemptRow",
    "CallRow",
    "CheckOutcome",
    "CheckVerdict",
    "CheckpointRow",
    "CompanionRow",
    "EndedRun",
    "EventRow",
    "FenceRow",
    "MessageRow",
    "NewCallRow",
    "RunRow",
    "SessionRow",
]
