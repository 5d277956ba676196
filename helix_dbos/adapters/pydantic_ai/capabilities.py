"""pydantic-ai's capabilities, each either honoured under the contract or refused with its reason.

A capability hooks into pydantic-ai's own run loop (``agent.run``), which does not run here: the
runtime reads the agent and runs its own loop. So each capability is judged by what it does. One
that only contributes static model settings (``Caching``, ``Thinking``, ``Citations``) is honoured
by merging those settings into every model request: a setting shapes the request the provider
answers, and a recovered run never asks again for a reply that was recorded, so replaying it costs
nothing. Every other one is refused when the agent is read, with the reason below, rather than
dropped silently. ``docs/pydantic-ai.md`` carries the same verdicts as a table, and a test checks
the table against this map and both against ``pydantic_ai.capabilities.CAPABILITY_TYPES``, so a
pydantic-ai release that adds a capability fails the test until someone judges it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pydantic_ai.settings import ModelSettings

from ...errors import UnsupportedFeatureError

#: Capabilities whose only effect is static model settings, merged into every model request.
SETTINGS_ONLY = frozenset({"Caching", "Citations", "Thinking"})

#: The ones every pydantic-ai agent carries by default. ``ToolSearch`` only defers tools marked
#: ``defer_loading``; no tool here is deferred (every listed tool is offered), so it has nothing to do.
DEFAULT_CAPABILITIES = frozenset({"ToolSearch", "PendingMessageDrainCapability"})

_LOOP = "it hooks into pydantic-ai's own run loop, which does not run here"

#: name -> None when it runs under the contract, else why it is refused. Keep in step with the
#: capabilities table in docs/pydantic-ai.md (tests/runtime/test_pydantic_features.py checks both).
VERDICTS: dict[str, str | None] = {
    "Caching": None,
    "Citations": None,
    "Thinking": None,
    "ToolSearch": None,
    "BatchModelRequests": "it wraps the model to submit requests through a provider's batch API and wait for them; "
    "here each model request is one request whose reply the ledger records before anything acts on it",
    "FileUnderstanding": f"it rewrites each model request (prepare_model_request); {_LOOP}",
    "ImageGeneration": "it adds a provider-executed (native) tool or a local fallback toolset of its own; "
    "a provider-executed call has no ledger row, and tools come from the agent's toolsets",
    "IncludeToolReturnSchemas": "it wraps the agent's toolsets from outside them; tools are listed from the agent's "
    "own toolsets (wrap the toolset itself instead)",
    "Instrumentation": f"it wraps the run, model requests and tool calls with pydantic-ai's spans; {_LOOP} "
    "(the runtime's own traces: HELIX_DBOS_OTLP_TRACES_ENDPOINTS)",
    "LocalWorkspace": "it gives the run a workspace (files, a shell) through the loop; a workspace's effects are "
    "not calls the ledger answers",
    "MCP": "it adds a provider-executed MCP tool or a toolset of its own; give the agent an MCPToolset in toolsets= "
    "instead, whose tools get policies from the server's annotations",
    "ModelFallback": f"it switches models when a request fails; {_LOOP} (the runtime retries the one model's "
    "provider errors itself)",
    "NativeCompaction": "it compacts the message history through the provider; the transcript is the ledger's, "
    "read from it for every request",
    "NativeTool": "provider-executed (native) tools run inside the model request, where no ledger row can gate "
    "or answer them",
    "PrefixTools": "it wraps the agent's toolsets from outside them; prefix the toolset itself "
    "(toolset.prefixed(...))",
    "RaiseContentFilterError": f"it inspects each reply (after_model_request); {_LOOP}",
    "ReinjectSystemPrompt": f"it edits the history before each request; {_LOOP} (instructions are rendered for "
    "every request anyway)",
    "RetryOnModelErrors": f"it retries failed model requests; {_LOOP} (the runtime retries provider errors itself)",
    "SetToolMetadata": "it wraps the agent's toolsets from outside them; give policies with tool metadata or "
    "tool_policies= instead",
    "WebFetch": "it adds a provider-executed (native) tool or a local fallback toolset of its own; a "
    "provider-executed call has no ledger row",
    "WebSearch": "it adds a provider-executed (native) tool or a local fallback toolset of its own; a "
    "provider-executed call has no ledger row",
    "WindowsWorkspace": "it gives the run a workspace (files, a shell) through the loop; a workspace's effects are "
    "not calls the ledger answers",
    "XSearch": "it adds a provider-executed (native) tool or a local fallback toolset of its own; a "
    "provider-executed call has no ledger row",
}


def _names(agent: Any) -> list[tuple[str, Any]]:
    root = getattr(agent, "_root_capability", None)
    return [(type(c).__name__, c) for c in getattr(root, "capabilities", []) or []]


def check_capabilities(agent: Any, name: str) -> dict[str, Any] | None:
    """Refuse the capabilities that cannot run here; the model settings of those that can.

    Returns the merged static settings of the settings-only capabilities (``None`` when none).
    """
    from pydantic_ai.settings import merge_model_settings

    settings: dict[str, Any] | None = None
    for cap_name, cap in _names(agent):
        if cap_name in DEFAULT_CAPABILITIES:
            continue
        if cap_name in SETTINGS_ONLY:
            contributed = cap.get_model_settings()
            if callable(contributed):
                raise UnsupportedFeatureError(
                    f"agent {name!r}: capability {cap_name} gives its model settings as a function of the run; "
                    "only static settings are merged into each request"
                )
            settings = dict(merge_model_settings(cast("ModelSettings | None", settings), contributed) or {})
            continue
        reason = VERDICTS.get(cap_name)
        if reason is None:
            hint = ": the runtime is the durability, hand the agent over without it" if cap_name == "DBOSDurability" else ""
            reason = f"{_LOOP}{hint}"
        raise UnsupportedFeatureError(f"agent {name!r}: capability {cap_name} is not supported, because {reason}")
    native = [t for t in getattr(agent, "_cap_native_tools", []) or [] if not getattr(t, "optional", False)]
    if native:
        raise UnsupportedFeatureError(
            f"agent {name!r}: native (provider-executed) tools {[type(t).__name__ for t in native]} are not supported, "
            f"because {VERDICTS['NativeTool']}"
        )
    return settings
