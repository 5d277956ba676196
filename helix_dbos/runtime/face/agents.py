"""The agents a ``Runtime`` is handed: a ``pydantic_ai.Agent`` read into a definition, and every
agent reachable through sub-agents collected by name (a child run resolves its agent by name)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...definitions import Agent
from ...errors import ConfigurationError


def adapt(agents: Iterable[Any], tool_policies: Mapping[str, Any] | None, deps_factories: Mapping[str, Any] | None) -> list[Agent]:
    """``pydantic_ai.Agent``s are read into definitions as they are (see ``definitions/pydantic_agent.py``)."""
    from pydantic_ai import Agent as PydanticAIAgent

    from ...definitions.pydantic_agent import from_pydantic_ai
    from ...definitions.pydantic_names import infer_agent_name

    out: list[Agent] = []
    for agent in agents:
        if isinstance(agent, PydanticAIAgent):
            name = infer_agent_name(agent)  # as pydantic-ai names an unnamed agent (definitions/pydantic_names.py)
            agent = from_pydantic_ai(
                agent, name=name, tool_policies=(tool_policies or {}).get(name), deps_factory=(deps_factories or {}).get(name)
            )
        elif not isinstance(agent, Agent):
            raise ConfigurationError(f"agents must be hx.Agent or pydantic_ai.Agent, not {type(agent).__name__}")
        out.append(agent)
    return out


def collect_agents(agents: Iterable[Agent]) -> dict[str, Agent]:
    """Every agent reachable from ``agents``, sub-agents included: child runs resolve them by name."""
    found: dict[str, Agent] = {}
    stack = list(agents)
    while stack:
        agent = stack.pop()
        other = found.get(agent.name)
        if other is not None and other is not agent:
            raise ConfigurationError(f"two different agents are named {agent.name!r}")
        if other is None:
            found[agent.name] = agent
            stack.extend(s.agent for s in agent.sub_agents)
    return found
