"""The runtime: DBOS workflows of runs, their steps and commits, and the entry points."""

from .faults import CRASH_POINTS
from .results import CallView, PendingCall, RunResult, SessionView, Usage
from .runtime import AnswerReceipt, RunHandle, Runtime

__all__ = ["CRASH_POINTS", "AnswerReceipt", "CallView", "PendingCall", "RunHandle", "RunResult", "Runtime", "SessionView", "Usage"]
