"""Where the result types and read queries used to live; kept so old imports keep working.

The value types are in ``helix_dbos/views.py``, the queries in ``runtime/reader.py``.
"""

from __future__ import annotations

from ..views import CallView, PendingCall, RunResult, SessionView, Usage
from .reader import at_rest, pending_calls, poll, read_result, read_session, run_usage

__all__ = ["CallView", "PendingCall", "RunResult", "SessionView", "Usage", "at_rest", "pending_calls", "poll", "read_result", "read_session", "run_usage"]
