"""The crash scenario's agent as an OpenAI Agents SDK agent (``SCENARIO_SDK=openai_agents``).

The same tools with the same bodies and policies as ``app.build_tools`` (each ``hx.tool`` rewritten
as a ``@function_tool`` with ``hx.openai_policy``; its body reads its helix call with
``hx.openai_tool_context()``), and the same scripted model (``app.model_function``) as an
``agents.Model``: stateless, its reply a function of the input items it is sent, each request
counted in the effects files. Transactional tools are ``hx.tool``s only and are left out.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
from agents import (
    Agent,
    GuardrailFunctionOutput,
    Model,
    ModelResponse,
    Usage,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import helix_dbos as hx


def sdk_tool(tool: hx.Tool) -> Any:
    """``tool`` (an ``hx.tool`` whose body takes ``(ctx, key)``) as an SDK function tool, same policy."""
    body = tool.execute
    assert body is not None
    if inspect.iscoroutinefunction(body):

        async def run(key: str) -> Any:
            return await body(hx.openai_tool_context(), key)
    else:

        def run(key: str) -> Any:  # type: ignore[misc]  (sync: the SDK runs it in a worker thread)
            return body(hx.openai_tool_context(), key)

    # the hx tool's own argument type (a deploy that changed the schema changes the SDK tool's too)
    run.__annotations__ = {"key": tool.input_model.model_fields["key"].annotation, "return": Any}
    run.__name__ = tool.name
    run.__doc__ = tool.description or f"The {tool.name} tool."
    sdk = function_tool(run, name_override=tool.name)
    return hx.openai_policy(sdk, replay=tool.replay, concurrency_group=tool.concurrency_group, sequential=tool.sequential,
                            reconcile=tool.reconcile, reconcile_timeout=tool.reconcile_timeout)


Effect = Callable[..., None]


class ScenarioModel(Model):
    """``app.model_function``'s script over the SDK's items: step 0 calls the scenario's tools with
    a text, every later step answers with text."""

    def __init__(self, scenario: str, calls: list[str], effect: Effect) -> None:
        self.scenario = scenario
        self.calls = calls
        self.effect = effect
        self.model = "scripted"

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,
                           handoffs: Any, tracing: Any, *, previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        assistant = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get("role") == "assistant"]
        responses = len(assistant)
        after = items[assistant[-1] + 1:] if assistant else []
        seen = [_loaded(i["output"]) for i in after if isinstance(i, dict) and i.get("type") == "function_call_output"]
        self.effect("model", step=responses, pid=os.getpid(), t=time.time(), seen=seen, sdk="openai_agents")
        if self.scenario == "model_error":
            request = httpx.Request("POST", "http://scripted.invalid/v1/responses")
            raise openai.BadRequestError("bad request", response=httpx.Response(400, request=request), body={"error": "bad request"})
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        if responses == 0:
            output: list[Any] = [_text("on it", 0)]
            output += [ResponseFunctionToolCall(type="function_call", call_id=f"call-{i}", name=name, arguments=json.dumps({"key": f"k{i}"}),
                                                id=f"fc-{i}", status="completed") for i, name in enumerate(self.calls)]
            return ModelResponse(output=output, usage=usage, response_id=None)
        return ModelResponse(output=[_text(f"done after {responses} steps", responses)], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scenario model does not stream")


def _loaded(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _text(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(type="message", id=f"msg-{n}", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def guardrails(effect: Effect) -> dict[str, Any]:
    """An input and an output guardrail that pass, each run counted in the effects (``guardrails``):
    the test counts outside the runtime how often each ran, across kills."""

    @input_guardrail(name="input_check")
    def input_check(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
        effect("guardrails", guardrail="input_check", given=given, pid=os.getpid())
        return GuardrailFunctionOutput(output_info={"length": len(str(given))}, tripwire_triggered=False)

    @output_guardrail(name="output_check")
    def output_check(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        effect("guardrails", guardrail="output_check", given=output, pid=os.getpid())
        return GuardrailFunctionOutput(output_info={"length": len(str(output))}, tripwire_triggered=False)

    return {"input_guardrails": [input_check], "output_guardrails": [output_check]}


def build_agent(scenario: str, tools: list[hx.Tool], calls: list[str], effect: Effect) -> Agent[Any]:
    """The agent over ``tools`` (the app's, the process's own module: under ``python -m`` it is
    ``__main__``, whose effects folder is set) whose first reply calls ``calls``; with
    ``SCENARIO_GUARDRAILS=1``, with the counted guardrails (``guardrails``)."""
    sdk = [sdk_tool(t) for t in tools if not t.transactional]
    names = {t.name for t in sdk}
    extra = guardrails(effect) if os.environ.get("SCENARIO_GUARDRAILS") == "1" else {}
    return Agent(name="crashy", model=ScenarioModel(scenario, [n for n in calls if n in names], effect), tools=sdk, **extra)
