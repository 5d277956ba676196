"""The runtime: DBOS workflows of runs, their steps and commits, and the entry points."""

from .faults import CRASH_POINTS
from ..views import CallView, PendingCall, RunResult, SessionView, StopReceipt, Usage
from .reader import Reader
from .runtime import AnswerReceipt, RunHandle, Runtime

__all__ = ["CRASH_POINTS", "AnswerReceipt", "CallView", "PendingCall", "Reader", "RunHandle", "RunResult", "Runtime", "SessionView", "StopReceipt", "Usage"]
