"""The model request, as one DBOS step whose recorded output is the reply.

Recovery never asks the model again for a reply DBOS recorded. The transcript is read inside the
step, from the ledger, and is never a step input or output: recording it per step would make
storage grow with the square of the conversation. The stop record is read in the same breath, so a
stop lands before the next model request is paid for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import ModelRequestParameters

from ..definitions import Agent
from ..ledger import store
from . import fence, transcript
from .durable import plain_tx
from .planning import plan_calls
from .state import env

RETRYABLE = (ModelRateLimitError, ModelUnavailableError, ModelServerError, ModelConnectionError, ModelRequestTimeout)


def is_retryable(exc: BaseException) -> bool:
    """Provider errors worth another attempt in the same step: rate limits, overload, 5xx, network."""
    if isinstance(exc, RETRYABLE):
        return True
    return isinstance(exc, ModelHTTPError) and (exc.status_code == 429 or exc.status_code >= 500)


def request_parameters(agent: Agent) -> ModelRequestParameters:
    output = agent.output_definition()
    return ModelRequestParameters(
        function_tools=[t.definition() for t in agent.tools] + [s.definition() for s in agent.sub_agents],
        output_tools=[output] if output else [],
        allow_text_output=output is None,
        output_mode="tool" if output else "text",
    )


def _with_instructions(messages: list[ModelMessage], instructions: str | None) -> list[ModelMessage]:
    """Instructions come from the agent as the code defines it now, never from storage."""
    if not instructions:
        return messages
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, ModelRequest):
            messages[i] = dataclasses.replace(m, instructions=instructions)
            break
    return messages


def _usage(response: ModelResponse) -> dict[str, Any]:
    u = response.usage
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": getattr(u, "cache_read_tokens", 0),
        "cache_write_tokens": getattr(u, "cache_write_tokens", 0),
    }


def _read(conn: sa.Connection, run_id: str, session_id: str) -> tuple[str | None, list[Any]]:
    fence.check(conn, run_id, "model request")  # a fork or a superseded run never asks the model
    stop = store.stop_of(conn, run_id)
    if stop is not None:
        return stop, []
    return None, [r["body"] for r in store.active_messages(conn, session_id)]


async def model_request_step(run_id: str, session_id: str, agent_name: str, step: int) -> dict[str, Any]:
    e = env()
    agent = e.agent(agent_name)
    stop, bodies = await plain_tx(_read, run_id, session_id)
    if stop is not None:
        return {"stopped": stop}
    messages = _with_instructions(transcript.load(bodies), agent.instructions)
    response = await model_request(
        agent.resolved_model(),
        messages,
        model_settings=agent.model_settings,
        model_request_parameters=request_parameters(agent),
    )
    # Planned here, inside the step, so the plan is recorded with the reply: a replay after a deploy
    # that changed or removed a tool follows the same path, and recovery judges the tool as it is now.
    return {
        "response": transcript.dump(response),
        "usage": _usage(response),
        "model_name": response.model_name,
        "step": step,
        "planned": plan_calls(agent, response),
    }
