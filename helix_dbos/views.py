"""Internal: what a read of the ledger gives back: plain value types, apart from the queries that build them.

The reader (``runtime/face/reader.py``) is the one place that fills these; the runtime returns them, the
CLI prints them and the HTTP schema (``wire.py``) is derived from their fields, so a field added
here reaches every surface at once. Records that stay dicts (a run, a checkpoint, an attempt, an
event, a call row) are ``TypedDict``s: existing callers keep subscripting them, and the type says
exactly which keys they hold. Status fields use the ledger's own words (``ledger/statuses.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict

from .errors import CallNotFoundError, RunFailedError
from .ledger.records import CallRow
from .ledger.statuses import (
    CallKind,
    CallStatus,
    CheckpointKind,
    DecidedBy,
    EntryKind,
    MessageKind,
    ReplayPolicy,
    RunStatus,
    SessionStatus,
    StopKind,
)

#: What a suspended run waits for: a human's approval, or the client's answer to a client tool.
PendingKind = Literal["approval", "client"]
#: What ``stop()`` found: the run stopped here (its own end status), or the stop waits for its boundary.
StopStatus = Literal["stop_requested", "stop_already_requested", RunStatus]


@dataclass(frozen=True)
class PendingCall:
    """A call the run is suspended on; answer it with ``approve`` or ``submit_tool_result``."""

    dispatch_id: str
    tool_name: str
    kind: PendingKind
    args: Any
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Usage:
    """Model requests and tokens of one run (every step's request, recovered ones included)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class RunResult:
    """A run as the ledger holds it: at rest once ``status`` is completed, failed, interrupted or suspended."""

    status: RunStatus
    output: Any
    session_id: str
    run_id: str
    pending: list[PendingCall] = field(default_factory=list)
    error: str | None = None
    error_code: str | None = None
    usage: Usage = field(default_factory=Usage)

    def raise_for_status(self) -> RunResult:
        if self.status == "failed":
            raise RunFailedError(f"run {self.run_id} failed: {self.error_code}", detail=self.error)
        return self


class AttemptRecord(TypedDict):
    """One body start of a call, and how it ended (``lost``, ``ok``, ``refused``, ``applied``...)."""

    attempt: int
    run_id: str
    executor_id: str | None
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None


class RunRecord(TypedDict):
    """One run of a session, in the session's order (``seq``)."""

    run_id: str
    seq: int
    entry: EntryKind
    entry_message: str | None
    checkpoint_id: str | None
    previous_run_id: str | None
    status: RunStatus
    error_code: str | None
    error: str | None
    output: Any
    steps: int
    recovery: str
    executor_id: str | None
    created_at: datetime
    ended_at: datetime | None
    #: When a worker took it (``queued`` until then), or its admission for a run started where admitted.
    started_at: datetime | None


class CheckpointRecord(TypedDict):
    """A pointer into the transcript a rewind or a retry can return to."""

    checkpoint_id: str
    run_id: str
    step: int
    kind: CheckpointKind
    message_seq: int
    superseded_by: str | None
    created_at: datetime


class MessageRecord(TypedDict):
    """One active transcript message as stored (``body`` is pydantic-ai's JSON of it)."""

    seq: int
    kind: MessageKind
    body: Any
    run_id: str
    step: int | None


@dataclass(frozen=True)
class CallView:
    """One tool call the model made, with every body start and how it was answered."""

    dispatch_id: str
    tool_name: str
    kind: CallKind
    args: Any
    status: CallStatus
    attempts: list[AttemptRecord]
    result: Any
    error: Any
    replay: ReplayPolicy
    step: int
    position: int
    run_id: str
    note: str | None
    tool_call_id: str | None
    approved: bool | None = None
    approval_actor: str | None = None
    child_session_id: str | None = None
    decided_by: DecidedBy | None = field(default=None, metadata={"doc": "'database' or 'check' when recovery, not the body, proved the outcome."})
    check_outcome: dict[str, Any] | None = field(default=None, metadata={"doc": "The reconcile check's last answer: verdict, attempt, result or reason."})


@dataclass(frozen=True)
class SessionView:
    """A session as it stands: its active transcript, runs, checkpoints and calls."""

    session_id: str
    agent_name: str
    status: SessionStatus
    current_run_id: str | None
    messages: list[Any]  # pydantic-ai ModelMessage, the active transcript
    runs: list[RunRecord]
    checkpoints: list[CheckpointRecord]
    calls: list[CallView]
    owner: str | None = field(default=None, metadata={"doc": "The principal that started the session (none without authentication)."})
    queue_position: int | None = field(
        default=None,
        metadata={"doc": "While the session's run is queued: how many runs of its queue (and owner) a worker takes before it (0: next)."},
    )

    def call(self, dispatch_id: str) -> CallView:
        """The call ``dispatch_id`` of this session; ``CallNotFoundError`` (not StopIteration) if none."""
        for c in self.calls:
            if c.dispatch_id == dispatch_id:
                return c
        raise CallNotFoundError(f"session {self.session_id!r} has no call {dispatch_id!r}")

    def calls_named(self, tool_name: str) -> list[CallView]:
        return [c for c in self.calls if c.tool_name == tool_name]


class SessionSummary(TypedDict):
    """One session of a list (newest first), or the row an ownership check reads."""

    session_id: str
    agent_name: str
    owner: str | None
    status: SessionStatus
    current_run_id: str | None
    run_count: int
    created_at: datetime
    updated_at: datetime


class EventRecord(TypedDict):
    """One ledger event, committed with the change it reports; ``seq`` orders a session's events."""

    session_id: str
    seq: int
    run_id: str | None
    type: str
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class EventPage:
    """Events after a cursor, with the session's status and newest seq read first (``reader.events``).

    If ``status`` is at rest, the events up to ``last_seq`` are all committed: a stream may end once
    it has delivered that seq.
    """

    status: SessionStatus
    last_seq: int
    events: list[EventRecord]


class CallRecord(CallRow):
    """A call's ledger row as stored (``attempts`` is the count of body starts), for lists across
    sessions: the ledger's own row type (``ledger/records.py``), its fields listed once."""


class ExecutorRecord(TypedDict):
    """One executor's lease, as ``helix-dbos executors`` and the ``executor_audit`` view show it."""

    executor_id: str
    host: str | None
    pid: int | None
    generation: int
    lease_seconds: float
    status: Literal["live", "lapsed", "released", "taken_over"]
    started_at: datetime
    renewed_at: datetime
    released_at: datetime | None
    taken_over_by: str | None
    taken_over_at: datetime | None
    taken_runs: int | None
    pending_runs: int
    took_over: list[str]


@dataclass(frozen=True)
class StopReceipt:
    """What ``stop()`` recorded: the run it stops, and whether it stopped at once (it was suspended).

    ``stopped=False`` means the running run stops at its next boundary; wait for it with ``wait()``.
    """

    session_id: str
    run_id: str
    kind: StopKind
    stopped: bool = field(metadata={"doc": "True when the run stopped in this request (it was suspended)."})
    status: StopStatus = field(metadata={"doc": "The run's end status once stopped, else stop_requested (or stop_already_requested)."})


def pick(record: type[Any], row: Mapping[str, Any]) -> Any:
    """The keys ``record`` (a TypedDict) declares, from a wider ledger row: the view holds what its type says."""
    return {k: row.get(k) for k in record.__annotations__}


__all__ = [
    "AttemptRecord",
    "CallRecord",
    "CallView",
    "CheckpointRecord",
    "DecidedBy",
    "EventPage",
    "EventRecord",
    "ExecutorRecord",
    "MessageRecord",
    "PendingCall",
    "PendingKind",
    "RunRecord",
    "RunResult",
    "SessionStatus",
    "SessionSummary",
    "SessionView",
    "StopReceipt",
    "StopStatus",
    "Usage",
]
