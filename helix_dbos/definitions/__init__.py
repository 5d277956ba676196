"""Internal: definitions: tools, agents and sub-agents, as plain data the runtime resolves by name.

``__all__`` names what the runtime imports from the package; users reach these names as ``hx.*``:
the public surface is ``helix_dbos``'s ``__all__``.
"""

from .agents import FINISH_TOOL, SUBAGENT_PREFIX, Agent, SubAgent, companion_agent, local_agent, remote_agent
from .context import CheckContext, ToolContext
from .limits import AgentLimits
from .model_retries import ModelRetries
from .reconcile import Applied, NotApplied
from .tools import Tool, client_tool, define_tool, tool

__all__ = [
    "FINISH_TOOL",
    "SUBAGENT_PREFIX",
    "Agent",
    "AgentLimits",
    "Applied",
    "CheckContext",
    "ModelRetries",
    "NotApplied",
    "SubAgent",
    "Tool",
    "ToolContext",
    "client_tool",
    "companion_agent",
    "define_tool",
    "local_agent",
    "remote_agent",
    "tool",
]
