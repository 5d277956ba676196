"""An ``agents.Agent``'s ``input_guardrails`` and ``output_guardrails``, run inside the model step.

The SDK's runner runs input guardrails on the first turn's input (beside the model call, or before
it with ``run_in_parallel=False``) and output guardrails on the final output, and raises
``InputGuardrailTripwireTriggered`` / ``OutputGuardrailTripwireTriggered`` on a tripwire. Here the
runtime asks for them through the seam (``Agent.check_input`` / ``check_output``): input
guardrails before the step's model request whenever the transcript ends with new user input (a
run's start, a resume or redirect with a message), never beside it, so a tripped input costs no
request; output guardrails on the reply that ends the run. Each guardrail's result (name,
tripwire, output info) is recorded with the step's reply, so a recovered run never runs it again;
a tripwire raises ``GuardrailTrippedError`` (``guardrail_tripped``), recorded as the step's outcome.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

from ...definitions import home
from ...definitions.context import RunScope
from ...errors import GuardrailTrippedError
from . import sdk_tracing

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

Stage = Literal["input", "output"]


def new_input(messages: list[ModelMessage]) -> str | list[dict[str, Any]] | None:
    """The user input the transcript ends with (what the SDK's runner hands input guardrails), or
    None when the last request holds none (tool results, a retry prompt: a later step of the run)."""
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return None
    prompts = [p for p in last.parts if isinstance(p, UserPromptPart)]
    if not prompts:
        return None
    if len(prompts) == 1 and isinstance(prompts[0].content, str):
        return prompts[0].content
    from .messages import _user_content

    return [{"role": "user", "content": _user_content(p.content)} for p in prompts]


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=repr)


def record(stage: Stage, name: str, output: Any) -> dict[str, Any]:
    """One guardrail's result as the ledger keeps it (a JSON object)."""
    return {"stage": stage, "guardrail": name, "tripwire": bool(output.tripwire_triggered), "output_info": _jsonable(output.output_info)}


def tripped(checked: dict[str, Any]) -> GuardrailTrippedError:
    info = json.dumps(checked["output_info"], ensure_ascii=False, default=str)
    where = "the run's input" if checked["stage"] == "input" else "the run's final output"
    return GuardrailTrippedError(f"{checked['stage']} guardrail {checked['guardrail']!r} tripped on {where}: {info[:2000]}", detail=checked)


async def run_all(stage: Stage, guardrails: list[Any], run_one: Callable[[Any], Coroutine[Any, Any, Any]], scope: RunScope, agent_name: str) -> list[dict[str, Any]]:
    """Every guardrail of ``stage`` at once (as the runner gathers them), each on the run's home loop
    inside its SDK ``guardrail_span``; the first tripped one in declared order raises."""

    async def one(g: Any) -> dict[str, Any]:
        name = g.get_name()
        with sdk_tracing.guardrail(name) as span:
            result: Any = await home.at_home(scope.session_id, run_one(g))
            checked = record(stage, name, result.output)
            sdk_tracing.triggered(span, checked["tripwire"])
        return checked

    with sdk_tracing.in_sdk_trace(scope, agent_name):
        results = list(await asyncio.gather(*(one(g) for g in guardrails)))
    for checked in results:
        if checked["tripwire"]:
            raise tripped(checked)
    return results
