"""The runtime: DBOS workflows of runs, their steps and commits, and the entry points."""

from ..views import CallView, PendingCall, RunResult, SessionView, StopReceipt, Usage
from .face.reader import Reader
from .face.runtime import AnswerReceipt, RunHandle, Runtime
from .process.faults import CRASH_POINTS

__all__ = ["CRASH_POINTS", "AnswerReceipt", "CallView", "PendingCall", "Reader", "RunHandle", "RunResult", "Runtime", "SessionView", "StopReceipt", "Usage"]
