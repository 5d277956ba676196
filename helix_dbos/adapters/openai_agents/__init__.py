"""Internal: the OpenAI Agents SDK adapter: an ``agents.Agent`` read, as it is, into an ``hx.Agent``.

This module is the adapter's light half (the registry imports it with the runtime): it never
imports the SDK. ``reading.py``, ``agent.py`` and the SDK load only when the runtime is handed an ``agents.Agent``
(or the app calls ``from_openai_agents``). See docs/openai-agents.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ...definitions.agents import Agent
from ..base import DepsFactory, ToolPolicies
from .policy import openai_dispatch_id, openai_policy, openai_tool_context

if TYPE_CHECKING:
    from .agent import OpenAIAgentsAgent


class OpenAIAgentsAdapter:
    """Reads ``agents.Agent``s (``from_openai_agents``)."""

    name = "openai_agents"

    def accepts(self, obj: object) -> bool:
        module = sys.modules.get("agents")  # never imported by the app: obj cannot be one of its agents
        cls = getattr(module, "Agent", None) if module is not None else None
        return isinstance(cls, type) and isinstance(obj, cls)

    def name_of(self, obj: object) -> str:
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not name:
            from ...errors import ConfigurationError

            raise ConfigurationError(f"an agents.Agent needs a name, not {name!r}")
        return name

    def build(self, obj: object, *, name: str, tool_policies: ToolPolicies | None, deps_factory: DepsFactory | None) -> Agent:
        from .reading import from_openai_agents

        return from_openai_agents(obj, name=name, tool_policies=tool_policies, deps_factory=deps_factory)


def from_openai_agents(agent: object, **options: Any) -> OpenAIAgentsAgent:
    """Read an ``agents.Agent`` into an ``hx.Agent`` (``agent.from_openai_agents``'s options)."""
    from .reading import from_openai_agents as read

    return read(agent, **options)


ADAPTER = OpenAIAgentsAdapter()

__all__ = ["ADAPTER", "OpenAIAgentsAdapter", "from_openai_agents", "openai_dispatch_id", "openai_policy", "openai_tool_context"]
