"""Internal: agent SDK adapters: the seam (``base``), the registry (``registry``), one subpackage per SDK.

A new SDK's adapter is its own subpackage plus one line here (docs/architecture.md, "Building an
adapter"). Importing this package imports no SDK: each adapter's ``__init__`` is the light half.
``__all__`` names what the runtime and the tests import from the package; users reach agents
through ``hx.Runtime(agents=[...])`` and the ``hx.*`` names.
"""

from __future__ import annotations

from . import openai_agents, pydantic_ai
from .base import AgentSeam, FrameworkAdapter, StreamingSeam
from .registry import adapt, adapt_one, register, registered, unregister

register(pydantic_ai.ADAPTER)
register(openai_agents.ADAPTER)

__all__ = ["AgentSeam", "FrameworkAdapter", "StreamingSeam", "adapt", "adapt_one", "register", "registered", "unregister"]
