"""The agents a ``Runtime`` is handed, read into definitions by the registered adapters
(``helix_dbos/adapters``), and every agent reachable through sub-agents collected by name (a child
run resolves its agent by name)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...adapters import registry
from ...definitions import Agent
from ...errors import ConfigurationError


def adapt(agents: Iterable[Any], tool_policies: Mapping[str, Any] | None, deps_factories: Mapping[str, Any] | None) -> list[Agent]:
    """Each object as a definition, through the first registered adapter that accepts it."""
    return registry.adapt(agents, tool_policies, deps_factories)


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
