"""A re-export, kept for callers not moved yet: every query lives in the module of the table it serves.

``store`` once held the queries for nine tables. They now live in ``sessions``, ``runs``,
``messages``, ``checkpoints``, ``calls``, ``attempts``, ``usage``, ``stops`` and ``events`` (with
``rows``, what they share); new code imports those. This name stays only because about seventy call
sites in modules other work is reshaping at the same time (``runtime/face/entries.py``,
``runtime/face/runtime.py``, ``runtime/face/executor_leases.py``, ``runtime/floor/commits.py``,
``runtime/flow/workflow.py``, ``runtime/flow/child_outcome.py``) still say ``store.``; moving them
is a mechanical follow-up, after which this module goes. Nothing is defined here.
"""

from __future__ import annotations

from .attempts import attempt_by_token, attempts_of, close_open_attempts
from .calls import (
    calls_of_checkpoint,
    get_call,
    insert_calls,
    list_calls,
    mark_decided,
    record_check,
    reopen_call,
    settle_call,
    unresolved_calls_of_run,
)
from .checkpoints import (
    checkpoint_event,
    get_checkpoint,
    insert_checkpoint,
    latest_checkpoint,
    list_checkpoints,
    new_checkpoint_id,
    next_step,
    rewind_to,
)
from .events import emit, emit_many, emit_many_params, emit_many_pg, emit_statement, events_after
from .messages import active_messages, insert_message, next_message_seq
from .rows import fetch_all, fetch_one, new_id, now
from .runs import count_run_step, end_run, get_run, insert_run, list_runs, start_queued_run
from .sessions import claim_session, get_session, insert_session, list_sessions
from .stops import request_stop, stop_of
from .usage import record_usage, usage_values

__all__ = [
    "active_messages", "attempt_by_token", "attempts_of", "calls_of_checkpoint", "checkpoint_event", "claim_session",
    "close_open_attempts", "count_run_step", "emit", "emit_many", "emit_many_params", "emit_many_pg", "emit_statement",
    "end_run", "events_after", "fetch_all", "fetch_one", "get_call", "get_checkpoint", "get_run", "get_session",
    "insert_calls", "insert_checkpoint", "insert_message", "insert_run", "insert_session", "latest_checkpoint",
    "list_calls", "list_checkpoints", "list_runs", "list_sessions", "mark_decided", "new_checkpoint_id", "new_id",
    "next_message_seq", "next_step", "now", "record_check", "record_usage", "reopen_call", "request_stop",
    "rewind_to", "settle_call", "start_queued_run", "stop_of", "unresolved_calls_of_run", "usage_values",
]
