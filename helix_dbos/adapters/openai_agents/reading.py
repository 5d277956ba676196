"""How an ``agents.Agent`` is read into an ``OpenAIAgentsAgent``: ``from_openai_agents``.

Reading is done once per agent (kept by the agent's identity and shape, so an agent offered by
several others as ``as_tool()`` is one definition), and everything the runtime cannot honour is
refused here, before any run starts (``features.py``). What a read definition does during a run
(listing its tools, asking its model, streaming) is ``agent.py``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...definitions.agents import SubAgent
from ...definitions.model_retries import ModelRetries
from ...definitions.tools import Tool
from ...errors import ConfigurationError, UnsupportedFeatureError
from ..base import DepsFactory
from . import agent_tools, features, handoffs, sdk_tracing
from .agent import Member, OpenAIAgentsAgent
from .handoffs import HandoffTool


def _output_schema(declared: Any, name: str) -> tuple[Any, Any]:
    """``(output schema, python type)`` for ``Agent(output_type=...)``: ``None`` for text."""
    from agents import AgentOutputSchema, AgentOutputSchemaBase

    if declared is None or declared is str:
        return None, None
    if isinstance(declared, AgentOutputSchema):
        return (None, None) if declared.is_plain_text() else (declared, declared.output_type)
    if isinstance(declared, AgentOutputSchemaBase):
        raise UnsupportedFeatureError(f"agent {name!r}: a custom AgentOutputSchemaBase cannot be stored as JSON; give the type or AgentOutputSchema(type)")
    return AgentOutputSchema(declared), declared


def mcp_lister(agent: Any) -> Any:
    """The agent whose tools a run lists: with ``mcp_servers``, a clone whose servers are the
    adapter's links to the app's (the app's agent and servers are left as they are)."""
    if not agent.mcp_servers:
        return agent
    from .mcp import LinkedServer

    return agent.clone(mcp_servers=[LinkedServer(server) for server in agent.mcp_servers])


def _model_of(agent: Any, name: str, provider: Any) -> Any:
    from agents.models.interface import Model

    if isinstance(agent.model, Model):
        return agent.model
    if provider is None:
        from agents import MultiProvider

        provider = MultiProvider()
    return provider.get_model(agent.model)


#: The last definition read from each SDK agent under its own name, and whether it was read with no
#: options: the agent behind an ``as_tool`` is that one definition however many agents offer it, and
#: the one the runtime was handed when the app gave it the agent too (child runs resolve their agent
#: by name, so two definitions under one name would clash).
_READ: dict[int, tuple[Any, OpenAIAgentsAgent, bool, tuple[int, ...]]] = {}


def _shape(agent: Any) -> tuple[int, ...]:
    """What a kept definition was read from: an agent changed since (its tools, handoffs, model,
    instructions or output type replaced) is read again."""
    return (id(agent.model), id(agent.instructions), id(agent.output_type), id(agent.model_settings),
            *map(id, agent.tools), -1, *map(id, agent.handoffs))


def from_openai_agents(
    agent: Any,
    *,
    name: str | None = None,
    tool_policies: Mapping[str, Mapping[str, Any]] | None = None,
    deps_factory: DepsFactory | None = None,
    model_provider: Any = None,
    max_steps: int | None = None,
    tool_timeout: float | None = None,
    sub_agents: list[SubAgent] | None = None,
    model_retries: ModelRetries | None = None,
    client_tools: list[Tool] | None = None,
) -> OpenAIAgentsAgent:
    """Read an ``agents.Agent`` into an ``hx.Agent``; refuses what the runtime cannot honour.

    ``tool_policies`` maps a tool name to policy keys and wins over the tool's own ``openai_policy``
    (any tool or handoff of the agents it can hand off to). ``deps_factory(deps_input)`` rebuilds
    the run's context object (``RunContextWrapper.context``, what tools and dynamic instructions
    see) from the JSON the run was started with. A model given by name is resolved by
    ``model_provider`` (default: the SDK's ``MultiProvider``). ``max_steps``: model requests per run
    (the SDK's ``max_turns``; default 50). ``tool_timeout``: the bound on a body without its own
    ``timeout_seconds`` (default 120 s). ``sub_agents``: helix sub-agents offered beside the agent's
    tools. ``handoffs=`` run in the same run (``handoffs.py``); ``agent.as_tool()`` tools are
    remote sub-agents (``agent_tools.py``). ``client_tools``: ``hx.client_tool``s offered beside the
    agent's tools, answered by the client (``submit_tool_result``), never by a body.
    """
    from agents import Agent as SdkAgent

    if not isinstance(agent, SdkAgent):
        raise ConfigurationError(f"from_openai_agents needs an agents.Agent, not {type(agent).__name__}")
    agent_name = name or agent.name
    plain = not (tool_policies or deps_factory or model_provider or max_steps or tool_timeout or sub_agents or model_retries or client_tools)
    kept = _READ.get(id(agent))
    if plain and agent_name == agent.name and kept is not None and kept[0] is agent and kept[2] and kept[3] == _shape(agent):
        return kept[1]
    made = _read(agent, agent_name, tool_policies, deps_factory, model_provider, max_steps, tool_timeout, sub_agents, model_retries,
                 client_tools)
    if agent_name == agent.name:
        _READ[id(agent)] = (agent, made, plain, _shape(agent))
    return made


def _child(agent: Any, model_provider: Any) -> OpenAIAgentsAgent:
    """The definition of an agent tool's agent: the one read last from it (the runtime's, when the
    app gave it the agent first), else a plain read."""
    kept = _READ.get(id(agent))
    if kept is not None and kept[0] is agent and kept[3] == _shape(agent):
        return kept[1]
    return from_openai_agents(agent) if model_provider is None else from_openai_agents(agent, model_provider=model_provider)


def _read(agent: Any, agent_name: str, tool_policies: Mapping[str, Mapping[str, Any]] | None, deps_factory: DepsFactory | None,
          model_provider: Any, max_steps: int | None, tool_timeout: float | None, sub_agents: list[SubAgent] | None,
          model_retries: ModelRetries | None, client_tools: list[Tool] | None = None) -> OpenAIAgentsAgent:
    reachable = handoffs.graph(agent, agent_name)
    for member_name, source in reachable.items():
        features.check_agent(source, member_name)
    schema, output_type = _output_schema(agent.output_type, agent_name)
    for member_name, source in reachable.items():
        other, _ = _output_schema(source.output_type, member_name)
        if (other is None) != (schema is None) or (other is not None and other.json_schema() != schema.json_schema()):
            raise UnsupportedFeatureError(
                f"agent {agent_name!r} can hand off to {member_name!r}, whose output_type differs: a run has one output, stored as "
                "the entry agent's type; give every agent it can hand off to the same output_type",
                detail={"agent": agent_name, "feature": "handoffs.output_type"})
    made = OpenAIAgentsAgent(
        name=agent_name,
        model=_model_of(agent, agent_name, model_provider),
        instructions=agent.instructions if isinstance(agent.instructions, str) else None,
        output_type=output_type,
        max_steps=max_steps or 50,
        sub_agents=list(sub_agents or []),
        model_retries=model_retries,
        source=agent,
        sdk_settings=agent.model_settings,
        output_schema=schema,
        tool_policies={k: dict(v) for k, v in (tool_policies or {}).items()},
        deps_factory=deps_factory,
        tool_timeout=tool_timeout,
    )
    made.sdk_model = made.model
    sdk_tracing.install()  # the SDK's spans go to the run's trace, none to OpenAI's backend (sdk_tracing)
    explicit = list(made.sub_agents)
    members: dict[str, Member] = {}
    by_name: dict[str, tuple[Any, HandoffTool]] = {}
    for member_name, source in reachable.items():
        where = f"agent {member_name!r}"
        model = made.sdk_model if source is agent else _model_of(source, member_name, model_provider)
        member = Member(member_name, source, model, source.model_settings, sub_agents=list(explicit) if source is agent else [],
                        lister=mcp_lister(source))
        member.handoffs = [_one_handoff(by_name, handoffs.read_handoff(h, made, where, made.tool_policies.get(_handoff_name(h))), h, agent_name)
                           for h in source.handoffs]
        for tool in source.tools:
            if getattr(tool, "_is_agent_tool", False):
                member.sub_agents.append(_agent_tool(tool, where, model_provider))
        members[member_name] = member
    made.members = members
    made.lister = members[agent_name].listing if agent_name in members else mcp_lister(agent)
    made.sub_agents = _distinct(explicit + [s for m in members.values() for s in m.sub_agents], agent_name)
    tools = [t for m in members.values() for t in m.source.tools if not getattr(t, "_is_agent_tool", False)]
    known = {getattr(t, "name", None) for t in tools} | {h.name for m in members.values() for h in m.handoffs}
    unknown = set(made.tool_policies) - known
    if unknown and not any(m.source.mcp_servers for m in members.values()):  # an MCP server's tools are named when it is listed, in a run
        raise ConfigurationError(f"agent {agent_name!r}: tool_policies name tools it does not have: {sorted(unknown)}")
    for client in list[Any](client_tools or []):  # from an untyped caller too
        if not isinstance(client, Tool) or not client.client:
            raise ConfigurationError(f"agent {agent_name!r}: client_tools takes hx.client_tool(...)s, not {client!r:.80}")
    made.client_tools = list(client_tools or [])
    listed: list[Any] = []
    for m in members.values():
        for tool in m.source.tools:
            if getattr(tool, "_is_agent_tool", False) or any(t is tool for t in listed):
                continue
            if made._tool_agents.setdefault(getattr(tool, "name", ""), m.source) is not m.source:
                raise ConfigurationError(f"agent {agent_name!r}: two different tools named {tool.name!r} in the agents it can hand off to")
            listed.append(tool)
    made.tools = [*made.read_tools(listed), *made.client_tools, *made.handoff_tools()]
    return made


def _one_handoff(seen: dict[str, tuple[Any, HandoffTool]], read: HandoffTool, item: Any, agent_name: str) -> HandoffTool:
    """One tool per handoff name: two agents handing off to the same agent the SDK's plain way (or
    with the same ``Handoff``) share it; two different handoffs under one name are refused."""
    from agents import Agent as SdkAgent

    kept = seen.get(read.name)
    if kept is None:
        seen[read.name] = (item, read)
        return read
    other, tool = kept
    if other is item or (isinstance(other, SdkAgent) and isinstance(item, SdkAgent) and tool.target == read.target):
        return tool
    raise ConfigurationError(f"agent {agent_name!r}: two different handoffs are named {read.name!r} in the agents it can hand off to")


def _handoff_name(item: Any) -> str:
    from agents import Handoff

    return item.tool_name if isinstance(item, Handoff) else Handoff.default_tool_name(item)


def _agent_tool(tool: Any, where: str, model_provider: Any) -> SubAgent:
    """An ``as_tool`` agent tool as a remote sub-agent under the tool's name and description."""
    from ...definitions.agents import remote_agent

    child = agent_tools.child_of(tool, f"{where}: tool {tool.name!r}")
    definition = _child(child, model_provider)
    sub = remote_agent(definition, description=tool.description or None)
    return dataclasses.replace(sub, tool=tool.name)


def _distinct(subs: list[SubAgent], agent_name: str) -> list[SubAgent]:
    """One sub-agent per tool name: the same agent tool offered by two agents of a handoff graph is one."""
    out: dict[str, SubAgent] = {}
    for sub in subs:
        other = out.get(sub.tool_name)
        if other is not None and other.agent is not sub.agent:
            raise ConfigurationError(f"agent {agent_name!r}: two different sub-agents are offered as {sub.tool_name!r}")
        out.setdefault(sub.tool_name, sub)
    return list(out.values())
