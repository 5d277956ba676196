"""A local sub-agent: the child's loop runs in process, inside the parent call's body.

It is pydantic-ai's own agent loop (no DBOS steps: inside a step there are none), so a crash kills
the child with its parent, and recovery answers the call ``outcome_unknown`` (the child's tools may
have run). Children that must survive a crash are remote sub-agents or companions.

The child's own tools get ``dispatch_id=None``: no id was minted and committed for them before they
ran, so none is offered as a dedupe key (a tool that needs one fails loudly, as it should).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...definitions import Agent, Tool, ToolContext
from ...errors import ConfigurationError

if TYPE_CHECKING:
    from pydantic_ai import Tool as PydanticTool


def _wrap(tool: Tool, agent: Agent, parent: ToolContext) -> PydanticTool[Any]:
    if tool.client or tool.requires_approval:
        raise ConfigurationError(
            f"local sub-agent {agent.name!r}: tool {tool.name!r} needs a client or an approval, which an "
            "in-process child cannot wait for"
        )

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

    from pydantic_ai import Tool as PydanticTool

    return PydanticTool.from_schema(call, name=tool.name, description=tool.description, json_schema=tool.definition().parameters_json_schema)


async def run_local_child(agent: Agent, message: str, parent: ToolContext) -> Any:
    """Run ``agent`` on ``message`` to completion; its (structured, JSON-ready) output is the call's result."""
    if agent.sub_agents:
        raise ConfigurationError(f"local sub-agent {agent.name!r} has sub-agents of its own; make it a remote sub-agent")
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.usage import UsageLimits

    child = PydanticAgent(
        agent.resolved_model(),
        instructions=agent.instructions,
        tools=[_wrap(t, agent, parent) for t in agent.tools],
        output_type=agent.output_type or str,
        model_settings=agent.model_settings,
    )
    result = await child.run(message, usage_limits=UsageLimits(request_limit=agent.max_steps))
    return agent.dump_output(result.output) if agent.output_type is not None else result.output
