"""The floor: the bench workload's agent loop hand-written on plain DBOS.

One async ``@DBOS.workflow`` per run, one DBOS step per model request (the reply checkpointed as
``ModelMessagesTypeAdapter`` JSON), one DBOS step per tool call (concurrent via ``asyncio.gather``).
History lives in workflow memory and is rebuilt on replay. At-least-once tools and no ledger: the
cheapest correct-ish durable agent loop, which helix_dbos and Pydantic AI are measured against.

Build it after ``bench.dbs.configure_dbos(url, launch=False)`` and before ``DBOS.launch()``: DBOS's
registry is process-global, and wrappers decorated against a destroyed one point at nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS
from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from bench.workload import TOOL_FUNCTIONS, Runner, ToolFunction, WorkloadSpec, make_model, tool_definitions

WORKFLOW_NAME = "bench.bare.agent_run"


def as_dbos_step(fn: ToolFunction, step_name: str) -> ToolFunction:
    """A `@DBOS.step` around a *copy* of `fn`.

    DBOS writes its metadata (`dbos_function_name`, func info) onto the decorated function object, so
    decorating the shared workload body directly would leak names between runners. `functools.wraps`
    keeps name, docstring and signature, so pydantic-ai derives the same tool schema as from `fn`.
    """

    @functools.wraps(fn)
    async def body(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    return DBOS.step(name=step_name)(body)


async def agent_loop(
    prompt: str,
    max_requests: int,
    model_step: Callable[[list[ModelMessage]], Awaitable[str]],
    tools: dict[str, ToolFunction],
) -> str:
    """The hand-written agent loop, parameterized by how a model request and a tool call are executed.

    `model_step` returns the reply as `ModelMessagesTypeAdapter` JSON text, so a durable implementation
    checkpoints a plain string (no pickled pydantic-ai objects) and replay re-validates it like a live reply.
    History lives only in memory: on replay it is rebuilt from the recorded step outputs.
    """
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(prompt)])]
    for _ in range(max_requests):
        response = ModelMessagesTypeAdapter.validate_json(await model_step(messages))[0]
        assert isinstance(response, ModelResponse)
        messages.append(response)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if not calls:
            return response.text or ""
        # Calling a DBOS step wrapper draws its step id synchronously, so creating the coroutines in
        # reply order gives deterministic ids even though they then run concurrently.
        pending = [tools[c.tool_name](**c.args_as_dict()) for c in calls]
        results = await asyncio.gather(*pending)
        messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart(tool_name=c.tool_name, content=r, tool_call_id=c.tool_call_id)
                    for c, r in zip(calls, results)
                ]
            )
        )
    raise RuntimeError(f"model did not answer within {max_requests} requests")


def _model_step_fn(spec: WorkloadSpec) -> Callable[[list[ModelMessage]], Awaitable[str]]:
    """Model request via `pydantic_ai.direct.model_request`, reply serialized to JSON text."""
    model = make_model(spec)
    params = ModelRequestParameters(function_tools=tool_definitions(), allow_text_output=True)

    async def request(messages: list[ModelMessage]) -> str:
        response = await model_request(model, messages, model_request_parameters=params)
        return ModelMessagesTypeAdapter.dump_json([response]).decode()

    return request


def make_runner(spec: WorkloadSpec) -> Runner:
    """(a) Hand-written durable agent loop on plain DBOS (build after `configure_dbos(..., launch=False)`).

    Per run: 1 async workflow, `spec.model_requests` model steps, `spec.tool_calls` tool steps.
    Step arguments (the history) are not persisted by DBOS, so passing them costs nothing.
    """
    model_step = DBOS.step(name="bench.bare.model_request")(_model_step_fn(spec))
    tools = {name: as_dbos_step(fn, f"bench.bare.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()}

    @DBOS.workflow(name=WORKFLOW_NAME)
    async def bare_agent_run(prompt: str) -> str:
        return await agent_loop(prompt, spec.model_requests + 1, model_step, tools)

    async def run() -> str:
        return await bare_agent_run(spec.prompt)

    run.workflow = bare_agent_run  # type: ignore[attr-defined]  # for DBOS.start_workflow / queues
    run.workflow_name = WORKFLOW_NAME  # type: ignore[attr-defined]
    return run
