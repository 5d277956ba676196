"""Runtime results as API bodies: the ledger's views go through ``helix_dbos/wire.py`` (the same
models the CLI's ``--json`` prints); what only the service has (answers, agents) is built here."""

from __future__ import annotations

from typing import Any

from ..definitions import Agent
from ..runtime import AnswerReceipt
from ..wire import run_out, session_out
from . import schemas as s

__all__ = ["agent_out", "answer_out", "run_out", "session_out"]


def answer_out(receipt: AnswerReceipt, run: Any | None) -> s.AnswerOut:
    return s.AnswerOut(session_id=receipt.session_id, dispatch_id=receipt.dispatch_id, remaining=list(receipt.remaining), run=run)


async def agent_out(agent: Agent) -> s.AgentOut:
    """The agent with every tool its toolsets list (a pydantic-ai agent's MCP servers too), each with
    the policy a call of it would be saved with, and the toolsets that could not list."""
    tools, unlisted = await agent.catalog()
    return s.AgentOut(
        name=agent.name,
        instructions=agent.instructions,
        unlisted=[s.UnlistedToolset(**u) for u in unlisted],
        tools=[
            s.ToolOut(
                name=t.name,
                description=t.description,
                replay=t.replay,
                client=t.client,
                requires_approval=bool(t.requires_approval),
                concurrency_group=t.concurrency_group,
                sequential=t.sequential,
            )
            for t in tools
        ],
    )
