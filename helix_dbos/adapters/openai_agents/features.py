"""Every field of the SDK's ``agents.Agent`` and every tool type in ``agents.Tool``, judged: it runs
under the contract, or the agent is refused when it is read (``UnsupportedFeatureError``), never
dropped silently. docs/openai-agents.md's capability table says the same, and
``tests/processes/test_openai_agents_features.py`` fails when the SDK adds a field or a tool type neither judges.

A verdict of ``None`` runs; a string is the reason the feature is refused.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError, UnsupportedFeatureError

#: ``agents.Agent``'s fields. A field not at its default that has a reason here refuses the agent.
AGENT_FIELDS: dict[str, str | None] = {
    "name": None,
    "handoff_description": None,
    "tools": None,
    "instructions": None,
    "model": None,
    "model_settings": None,
    "output_type": None,
    "reset_tool_choice": None,
    "mcp_servers": None,
    "mcp_config": None,
    "prompt": "a Responses prompt template is resolved by OpenAI's servers, outside the transcript the ledger keeps",
    "handoffs": None,  # in the same run: the handoff a recorded call, the agent answering read from the transcript (handoffs.py)
    "input_guardrails": None,  # run before the run's first model request, recorded with its reply (guardrails.py)
    "output_guardrails": None,  # run on the reply that gives the final output, recorded with it
    "hooks": "agent hooks are called by the SDK's runner, which does not run here",
    "tool_use_behavior": "a tool result as the run's output has no place in the ledger's finish: only 'run_llm_again' runs",
}

#: The tool types of ``agents.Tool``. Only function tools are calls the ledger can gate and answer.
TOOL_TYPES: dict[str, str | None] = {
    "FunctionTool": None,
    "FileSearchTool": "a hosted tool runs inside the model request, where no ledger row can gate or answer it",
    "WebSearchTool": "a hosted tool runs inside the model request, where no ledger row can gate or answer it",
    "CodeInterpreterTool": "a hosted tool runs inside the model request, where no ledger row can gate or answer it",
    "ImageGenerationTool": "a hosted tool runs inside the model request, where no ledger row can gate or answer it",
    "HostedMCPTool": "the provider calls the MCP server inside the model request, where no ledger row can gate or answer it",
    "ToolSearchTool": "tool search loads tools inside the model request; every tool is offered here",
    "ProgrammaticToolCallingTool": "a generated program calls tools inside the model request, where no ledger row gates them",
    "ComputerTool": "computer actions are not function calls: their executor is not a body the ledger gates",
    "LocalShellTool": "shell actions are not function calls: their executor is not a body the ledger gates",
    "ShellTool": "shell actions are not function calls: their executor is not a body the ledger gates",
    "ApplyPatchTool": "patch actions are not function calls: their executor is not a body the ledger gates",
    "CustomTool": "a custom (free-text) tool call is not a function call with JSON arguments the ledger validates",
}


def check_agent(agent: Any, name: str) -> None:
    """Refuse, with the reason, every field of ``agent`` this adapter cannot honour."""
    from agents import Agent

    defaults = Agent(name=name, model=agent.model)  # the same model: the SDK's implicit settings follow it
    for field, reason in AGENT_FIELDS.items():
        if reason is None:
            continue
        value, default = getattr(agent, field), getattr(defaults, field)
        if value != default:
            raise UnsupportedFeatureError(f"agent {name!r}: {field}= is not supported: {reason}", detail={"agent": name, "feature": field})
    for server in agent.mcp_servers:
        check_mcp_server(server, name)
    if agent.model is None:
        raise ConfigurationError(f"agent {name!r} has no model; give Agent(model=...) (an OpenAIChatCompletionsModel, an OpenAIResponsesModel, or a name)")
    retry = agent.model_settings.retry
    if retry is not None:
        raise UnsupportedFeatureError(f"agent {name!r}: model_settings.retry is the SDK runner's; give from_openai_agents(model_retries=hx.ModelRetries(...))")


def check_mcp_server(server: Any, agent: str) -> None:
    """Refuse, with the reason, an MCP server setting this adapter cannot honour."""
    from agents.mcp import MCPServer

    where = f"agent {agent!r}: MCP server {getattr(server, 'name', server)!r}"
    if not isinstance(server, MCPServer):
        raise ConfigurationError(f"{where} is a {type(server).__name__}, not an agents.mcp.MCPServer")
    if getattr(server, "session", None) is not None:
        raise UnsupportedFeatureError(f"{where} is already connected: its session belongs to the app's event loop; give it unconnected "
                                      "(helix connects it in whichever process runs the step)", detail={"agent": agent, "feature": "mcp_servers"})
    if server.tool_input_guardrails or server.tool_output_guardrails:
        raise UnsupportedFeatureError(f"{where}: tool guardrails run around the body in the SDK's runner, not here; check inside the server",
                                      detail={"agent": agent, "feature": "mcp_servers"})
    if server.custom_data_extractor is not None:
        raise UnsupportedFeatureError(f"{where}: custom_data_extractor attaches data to the SDK's run items, which are not kept here",
                                      detail={"agent": agent, "feature": "mcp_servers"})
