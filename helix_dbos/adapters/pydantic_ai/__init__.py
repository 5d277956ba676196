"""Internal: the pydantic-ai adapter: a ``pydantic_ai.Agent`` read, as it is, into an ``hx.Agent``.

This module is the adapter's light half (the registry imports it with the runtime); ``agent.py``
and pydantic-ai itself load only when the runtime is handed a ``pydantic_ai.Agent``.
"""

from __future__ import annotations

import sys

from ...definitions.agents import Agent
from ..base import DepsFactory, ToolPolicies


class PydanticAIAdapter:
    """Reads ``pydantic_ai.Agent``s (``from_pydantic_ai``)."""

    name = "pydantic_ai"

    def accepts(self, obj: object) -> bool:
        module = sys.modules.get("pydantic_ai")  # never imported: obj cannot be one of its agents
        return module is not None and isinstance(obj, module.Agent)

    def name_of(self, obj: object) -> str:
        from .names import infer_agent_name

        return infer_agent_name(obj)  # as pydantic-ai names an unnamed agent (names.py)

    def build(self, obj: object, *, name: str, tool_policies: ToolPolicies | None, deps_factory: DepsFactory | None) -> Agent:
        from .agent import from_pydantic_ai

        return from_pydantic_ai(obj, name=name, tool_policies=tool_policies, deps_factory=deps_factory)  # type: ignore[arg-type]


ADAPTER = PydanticAIAdapter()

__all__ = ["ADAPTER", "PydanticAIAdapter"]
