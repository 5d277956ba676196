"""The words the ledger stores. Plain strings, so an operator's SQL reads the same as the code."""

from __future__ import annotations

from typing import Final, Literal

RunStatus = Literal["running", "completed", "failed", "interrupted", "suspended_client_tool"]
RUN_TERMINAL: Final = frozenset({"completed", "failed", "interrupted"})
RUN_AT_REST: Final = RUN_TERMINAL | {"suspended_client_tool"}

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
CALL_SETTLED: Final = frozenset(
    {"ok", "error", "denied", "outcome_unknown", "replay_limit_reached", "run_stopped", "not_started"}
)
#: Saved but not answered yet: recovery must decide what to do with these.
CALL_UNRESOLVED: Final = frozenset({"saved", "running"})
#: Statuses that put a call's effect in doubt, so calls ordered after it must not run.
CALL_IN_DOUBT: Final = frozenset({"outcome_unknown", "replay_limit_reached"})

CallKind = Literal["tool", "client", "remote", "local", "companion", "finish", "invalid"]
#: Kinds whose call starts a body in this process or a child workflow: these make a step save first.
BODY_KINDS: Final = frozenset({"tool", "remote", "local", "companion"})

CheckpointKind = Literal["append", "step", "suspension"]

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
REDIRECTING_ENTRIES: Final = frozenset({"turn", "resume_with_message", "retry_with_message", "retry_from_checkpoint"})

PairedBy = Literal["body", "recovery", "redirect", "rewind", "run_failed", "stop", "answer", "validation"]
