"""Internal: the runtime: DBOS workflows of runs, their steps and commits, and the entry points.

``__all__`` names what ``helix_dbos``, the service and the CLI import from the package; users reach
them as ``hx.*``: the public surface is ``helix_dbos``'s ``__all__``.
"""

from ..views import CallView, PendingCall, RunResult, SessionView, StopReceipt, Usage
from .face.reader import Reader
from .face.runtime import AnswerReceipt, RunHandle, Runtime
from .process.faults import CRASH_POINTS

__all__ = ["CRASH_POINTS", "AnswerReceipt", "CallView", "PendingCall", "Reader", "RunHandle", "RunResult", "Runtime", "SessionView", "StopReceipt", "Usage"]
