"""helix_dbos: LLM agents as DBOS workflows that never pay the model twice, never run an unsafe
side effect twice, and never leave a tool call unanswered.

The contract is the Helix recoverable-tools contract: every reply whose calls start a body is saved
first; after a lost process, ``replay="safe"`` calls run again (at most 3 bodies in all) and every
other call is answered ``outcome_unknown``, so the model decides what to do with what may have run.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AgentAlreadyRunningError,
    AnswerKindError,
    AuthenticationError,
    CallNotFoundError,
    CallsPendingError,
    CheckpointNotFoundError,
    ConfigurationError,
    ConflictError,
    CsrfError,
    DispatchIdUnavailableError,
    DuplicateAnswerError,
    ExecutorIdInUseError,
    ForbiddenError,
    GuardrailTrippedError,
    HelixError,
    HostNotAllowedError,
    LimitsMismatchError,
    ModelAuthFailedError,
    ModelProviderUnavailableError,
    ModelRateLimitedError,
    ModelRequestInvalidError,
    NotFoundError,
    NothingToResumeError,
    OutputRetriesExceededError,
    PayloadTooLargeError,
    RunFailedError,
    RunFencedError,
    RunNotFoundError,
    RuntimeAlreadyLaunchedError,
    RunTimeoutError,
    SessionNotFoundError,
    StaleAnswerError,
    StoreStatementError,
    StoreUnavailableError,
    ToolConnectionError,
    ToolServerError,
    ToolTimeoutError,
    TransactionEscapedError,
    UnknownAgentError,
    UnsupportedFeatureError,
    UnsupportedMediaTypeError,
    UsageLimitExceededError,
    ValidationError,
)

if TYPE_CHECKING:
    from .adapters.openai_agents import (
        from_openai_agents,
        openai_dispatch_id,
        openai_policy,
        openai_tool_context,
    )
    from .adapters.openai_agents.agent import OpenAIAgentsAgent
    from .adapters.pydantic_ai.agent import PydanticAgent, dispatch_id, from_pydantic_ai
    from .definitions import (
        Agent,
        AgentLimits,
        Applied,
        CheckContext,
        ModelRetries,
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
    from .runtime import (
        AnswerReceipt,
        CallView,
        PendingCall,
        RunHandle,
        RunResult,
        Runtime,
        SessionView,
        StopReceipt,
        Usage,
    )

# Every public name is imported on first use (PEP 562). The runtime's load DBOS and SQLAlchemy,
# pydantic-ai's agent adapter loads pydantic-ai, and the definitions load pydantic: a module that
# only defines tools pays for pydantic alone, and ``helix-dbos --help`` (a subpackage of this one)
# for none of them.
_LAZY = {
    **{name: ".definitions" for name in (
        "Agent", "AgentLimits", "Applied", "CheckContext", "ModelRetries", "NotApplied", "SubAgent", "Tool", "ToolContext",
        "client_tool", "companion_agent", "define_tool", "local_agent", "remote_agent", "tool",
    )},
    "PydanticAgent": ".adapters.pydantic_ai.agent",
    "dispatch_id": ".adapters.pydantic_ai.agent",
    "from_pydantic_ai": ".adapters.pydantic_ai.agent",
    # the OpenAI Agents SDK adapter: these four never import the SDK (its agent module does)
    **{name: ".adapters.openai_agents" for name in ("from_openai_agents", "openai_dispatch_id", "openai_policy", "openai_tool_context")},
    "OpenAIAgentsAgent": ".adapters.openai_agents.agent",
    **{name: ".runtime" for name in (
        "AnswerReceipt", "CallView", "PendingCall", "RunHandle", "RunResult", "Runtime", "SessionView", "StopReceipt", "Usage",
    )},
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentAlreadyRunningError",
    "AgentLimits",
    "AnswerKindError",
    "AnswerReceipt",
    "Applied",
    "AuthenticationError",
    "CallNotFoundError",
    "CallView",
    "CallsPendingError",
    "CheckContext",
    "CheckpointNotFoundError",
    "ConfigurationError",
    "ConflictError",
    "CsrfError",
    "DispatchIdUnavailableError",
    "DuplicateAnswerError",
    "ExecutorIdInUseError",
    "ForbiddenError",
    "GuardrailTrippedError",
    "HelixError",
    "HostNotAllowedError",
    "LimitsMismatchError",
    "ModelAuthFailedError",
    "ModelProviderUnavailableError",
    "ModelRateLimitedError",
    "ModelRequestInvalidError",
    "ModelRetries",
    "NotApplied",
    "NotFoundError",
    "NothingToResumeError",
    "OpenAIAgentsAgent",
    "OutputRetriesExceededError",
    "PayloadTooLargeError",
    "PendingCall",
    "PydanticAgent",
    "RunFailedError",
    "RunFencedError",
    "RunHandle",
    "RunNotFoundError",
    "RunResult",
    "RunTimeoutError",
    "Runtime",
    "RuntimeAlreadyLaunchedError",
    "SessionNotFoundError",
    "SessionView",
    "StaleAnswerError",
    "StopReceipt",
    "StoreStatementError",
    "StoreUnavailableError",
    "SubAgent",
    "Tool",
    "ToolConnectionError",
    "ToolContext",
    "ToolServerError",
    "ToolTimeoutError",
    "TransactionEscapedError",
    "UnknownAgentError",
    "UnsupportedFeatureError",
    "UnsupportedMediaTypeError",
    "Usage",
    "UsageLimitExceededError",
    "ValidationError",
    "client_tool",
    "companion_agent",
    "define_tool",
    "dispatch_id",
    "from_openai_agents",
    "from_pydantic_ai",
    "local_agent",
    "openai_dispatch_id",
    "openai_policy",
    "openai_tool_context",
    "remote_agent",
    "tool",
]
