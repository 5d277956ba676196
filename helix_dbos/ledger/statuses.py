"""The words the ledger stores. Plain strings, so an operator's SQL reads the same as the code."""

from __future__ import annotations

from typing import Final, Literal

#: ``queued``: admitted and waiting on a DBOS queue for a worker (docs/scaling.md); ``running`` from
#: the moment a worker's first transaction of the run takes it.
RunStatus = Literal["queued", "running", "completed", "failed", "interrupted", "suspended_client_tool"]
#: A run whose session refuses another entry: it is waiting for a worker or running in one.
RUN_LIVE: Final[frozenset[RunStatus]] = frozenset({"queued", "running"})
RUN_TERMINAL: Final[frozenset[RunStatus]] = frozenset({"completed", "failed", "interrupted"})
RUN_AT_REST: Final[frozenset[RunStatus]] = RUN_TERMINAL | {"suspended_client_tool"}
#: A session is ``new`` until its first run is admitted, then carries its current run's status.
SessionStatus = Literal["new", RunStatus]

CallStatus = Literal[
    "saved",
    "running",
    "pending",
    "ok",
    "error",
    "denied",
    "outcome_unknown",
    "replay_limit_reached",
    "run_stopped",
    "not_started",
]
#: A call in one of these has its answer; the model will see it in the step's tool results.
CALL_SETTLED: Final[frozenset[CallStatus]] = frozenset(
    {"ok", "error", "denied", "outcome_unknown", "replay_limit_reached", "run_stopped", "not_started"}
)
#: Saved but not answered yet: recovery must decide what to do with these.
CALL_UNRESOLVED: Final[frozenset[CallStatus]] = frozenset({"saved", "running"})
#: Statuses that put a call's effect in doubt, so calls ordered after it must not run.
CALL_IN_DOUBT: Final[frozenset[CallStatus]] = frozenset({"outcome_unknown", "replay_limit_reached"})

CallKind = Literal["tool", "client", "remote", "local", "companion", "finish", "invalid"]
#: A tool's replay policy (``Tool.replay``), saved on each of its calls (``calls.replay``): whether
#: recovery may run a body that started and left no result again.
ReplayPolicy = Literal["safe", "unsafe"]

#: What a checkpoint marks (the type of ``views.CheckpointRecord.kind``).
CheckpointKind = Literal["append", "step", "suspension"]
#: Kinds whose call starts a body in this process or a child workflow: these make a step save first.
BODY_KINDS: Final[frozenset[CallKind]] = frozenset({"tool", "remote", "local", "companion"})

EntryKind = Literal[
    "start",
    "turn",
    "resume_continue",
    "resume_with_message",
    "resume_from_checkpoint",
    "retry",
    "retry_with_message",
    "retry_from_checkpoint",
]
#: Entries whose message redirects the turn: unresolved calls are paired, nothing runs again.
REDIRECTING_ENTRIES: Final[frozenset[EntryKind]] = frozenset({"turn", "resume_with_message", "retry_with_message", "retry_from_checkpoint"})

PairedBy = Literal["body", "recovery", "redirect", "rewind", "run_failed", "stop", "answer", "validation"]
#: How recovery, rather than a body, proved a call's outcome (``calls.decided_by``).
DecidedBy = Literal["database", "check"]
#: What a call's reconcile check answered (``calls.check_outcome["verdict"]``).
Verdict = Literal["applied", "not_applied", "unknown"]

#: How an attempt (one body start) ended: its body's answer, ``refused`` (a late write fenced off),
#: ``lost`` (the call was answered without it), or what recovery proved (``rolled_back``: a
#: transactional body that never committed; ``applied``/``not_applied``: a check said). NULL while open.
AttemptOutcome = Literal["ok", "error", "refused", "lost", "rolled_back", "applied", "not_applied"]

#: A stop record's kind (``stops.kind``).
StopKind = Literal["interrupt", "abort"]
#: A transcript message's kind (pydantic-ai's message kinds, ``messages.kind``).
MessageKind = Literal["request", "response"]
#: A persistent companion's incarnation (``companions.status``).
CompanionStatus = Literal["live", "closed", "lost"]


def awaits_answer(kind: str, requires_approval: bool, approved: bool | None) -> bool:
    """A client call, or an approval-gated call nobody has approved yet: only an answer may move it.

    The one definition behind recovery's "wait", the entries' "calls pending" refusal and the
    pending calls a suspended run reports, so the three can never disagree on what a run waits for.
    (Of a ``pending`` call, true exactly when it is unanswered: a denial settles the call at once.)
    """
    return kind == "client" or (bool(requires_approval) and approved is not True)
