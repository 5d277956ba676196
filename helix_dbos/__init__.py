"""helix_dbos: LLM agents as DBOS workflows that never pay the model twice, never run an unsafe
side effect twice, and never leave a tool call unanswered.

The contract is the Helix recoverable-tools contract: every reply whose calls start a body is saved
first; after a lost process, ``replay="safe"`` calls run again (at most 3 bodies in all) and every
other call is answered ``outcome_unknown``, so the model decides what to do with what may have run.
"""

from .definitions import (
    Agent,
    Applied,
    CheckContext,
    NotApplied,
    SubAgent,
    Tool,
    ToolContext,
    client_tool,
    companion_agent,
    define_tool,
    local_agent,
    remote_agent,
    tool,
)
from .definitions.pydantic_agent import PydanticAgent, dispatch_id, from_pydantic_ai
from .errors import HelixError, RunTimeoutError
from .runtime import AnswerReceipt, CallView, PendingCall, RunHandle, RunResult, Runtime, SessionView, StopReceipt, Usage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AnswerReceipt",
    "Applied",
    "CallView",
    "CheckContext",
    "HelixError",
    "NotApplied",
    "PendingCall",
    "PydanticAgent",
    "RunHandle",
    "RunResult",
    "RunTimeoutError",
    "Runtime",
    "SessionView",
    "StopReceipt",
    "SubAgent",
    "Tool",
    "ToolContext",
    "Usage",
    "client_tool",
    "companion_agent",
    "define_tool",
    "dispatch_id",
    "from_pydantic_ai",
    "local_agent",
    "remote_agent",
    "tool",
]
