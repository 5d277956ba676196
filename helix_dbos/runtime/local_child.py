"""A local sub-agent: the child's loop runs in process, inside the parent call's body.

It is pydantic-ai's own agent loop (no DBOS steps: inside a step there are none), so a crash kills
the child with its parent, and recovery answers the call ``outcome_unknown``. Children that must
survive a crash are remote sub-agents.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import Tool as PydanticTool

from ..definitions import Agent, Tool, ToolContext
from ..errors import ConfigurationError


def _wrap(tool: Tool, agent: Agent, parent: ToolContext) -> PydanticTool[Any]:
    if tool.client or tool.requires_approval:
        raise ConfigurationError(f"local sub-agent {agent.name!r}: tool {tool.name!r} needs a client or approval; use a remote sub-agent")

    async def call(**kwargs: Any) -> Any:
        ctx = ToolContext(
            session_id=parent.session_id,
            run_id=parent.run_id,
            dispatch_id=None,
            tool_call_id=None,
            attempt=parent.attempt,
            agent_name=agent.name,
            tool_name=tool.name,
        )
        return await tool.invoke(tool.validate(kwargs), ctx)

    return PydanticTool.from_schema(call, name=tool.name, description=tool.description, json_schema=tool.definition().parameters_json_schema)


async def run_local_child(agent: Agent, message: str, parent: ToolContext) -> Any:
    child = PydanticAgent(
        agent.resolved_model(),
        instructions=agent.instructions,
        tools=[_wrap(t, agent, parent) for t in agent.tools],
        output_type=agent.output_type or str,
    )
    result = await child.run(message)
    return agent.dump_output(result.output) if agent.output_type is not None else result.output
