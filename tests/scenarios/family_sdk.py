"""The family's human-in-the-loop agents as OpenAI Agents SDK agents (``SCENARIO_SDK=openai_agents``).

The same plans, tool bodies and policies as ``family.py``: each ``hx.tool`` rewritten as a
``@function_tool`` (``requires_approval`` as the SDK's ``needs_approval``: ``True`` or a per-call
function; the replay policy with ``hx.openai_policy``), its body reading its helix call with
``hx.openai_tool_context()``. The model is an ``agents.Model`` that reads the SDK's input items
back into the messages a family plan takes and answers with the plan's parts as SDK output items, so
both SDKs are asked the same questions and log the same ``model`` effects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelResponse as PaiResponse

import helix_dbos as hx


def _loaded(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def to_messages(items: list[Any]) -> list[ModelMessage]:
    """The SDK's input items as the messages a family plan reads: a user item or a run of tool
    outputs is a request, a run of assistant items (text and calls) one reply."""
    out: list[ModelMessage] = []
    for item in items:
        kind, role = item.get("type"), item.get("role")
        if role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(item["content"] if isinstance(item["content"], str) else
                                                          "".join(c.get("text", "") for c in item["content"]))]))
        elif kind == "function_call_output":
            part = ToolReturnPart(tool_name="?", content=_loaded(item["output"]), tool_call_id=item["call_id"])
            if out and isinstance(out[-1], ModelRequest) and all(isinstance(p, ToolReturnPart) for p in out[-1].parts):
                out[-1].parts = [*out[-1].parts, part]
            else:
                out.append(ModelRequest(parts=[part]))
        elif kind == "function_call" or role == "assistant" or kind == "message":
            part_: Any = ToolCallPart(item["name"], _loaded(item["arguments"]), item["call_id"]) if kind == "function_call" else TextPart("")
            if out and isinstance(out[-1], PaiResponse):
                out[-1].parts = [*out[-1].parts, part_]
            else:
                out.append(PaiResponse(parts=[part_]))
    return out


class ScriptedModel(Model):
    """``family.scripted(name, plan)`` as an ``agents.Model``: every request logged, held on
    ``hold_model_<name>``, answered by the plan."""

    def __init__(self, home: ModuleType, name: str, plan: Callable[[list[ModelMessage]], Any]) -> None:
        self.home = home
        self.name = name
        self.plan = plan
        self.model = "scripted"

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,
                           handoffs: Any, tracing: Any, *, previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        messages = to_messages([{"role": "user", "content": input}] if isinstance(input, str) else list(input))
        home = self.home
        home.effect("model", agent=self.name, step=home.steps_in_turn(messages), prompts=home.prompts(messages),
                    seen=home.returns(messages), sdk="openai_agents")
        await home.hold(f"model_{self.name}")
        planned = self.plan(messages)
        parts = [TextPart(planned)] if isinstance(planned, str) else list(planned)
        output: list[Any] = []
        for i, part in enumerate(parts):
            if isinstance(part, ToolCallPart):
                output.append(ResponseFunctionToolCall(type="function_call", call_id=part.tool_call_id, name=part.tool_name,
                                                       arguments=part.args_as_json_str(), id=f"fc-{i}", status="completed"))
            else:
                output.append(ResponseOutputMessage(type="message", id=f"msg-{i}", role="assistant", status="completed",
                                                    content=[ResponseOutputText(type="output_text", text=part.content, annotations=[])]))
        return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the family's scripted model does not stream")


def sdk_body(tool: hx.Tool, **options: Any) -> Any:
    """A family ``body`` tool (``(ctx, key)``) as a ``@function_tool`` with the same replay policy;
    ``options`` go to ``function_tool`` (``needs_approval=``)."""
    run_body = tool.execute
    assert run_body is not None

    async def run(key: str) -> Any:
        return await run_body(hx.openai_tool_context(), key)

    run.__name__ = tool.name
    run.__doc__ = tool.description or f"The {tool.name} tool."
    made = function_tool(run, name_override=tool.name, **options)
    return hx.openai_policy(made, replay=tool.replay, sequential=tool.sequential)


async def _over_100(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    return bool(params["amount"] > 100)


def agents(home: ModuleType) -> list[Any]:
    """``home.AGENTS`` with the human-in-the-loop agents as SDK agents (the client tool offered with
    ``from_openai_agents(client_tools=...)``) (the sub-agent parents stay
    ``hx.Agent``s: their children are offered as helix sub-agents either way). ``home`` is the family
    module as this process runs it (``__main__`` under ``python -m``, whose effects folder is set)."""
    wire_body = home._wire

    async def wire(amount: int, to: str) -> dict[str, Any]:
        """Wire money to someone."""
        return dict(await wire_body(hx.openai_tool_context(), amount, to))

    approver = Agent(name="approver", model=ScriptedModel(home, "approver", home._approver),
                     tools=[function_tool(wire, needs_approval=_over_100), sdk_body(home.purge, needs_approval=True)])
    stopper = Agent(name="stopper", model=ScriptedModel(home, "stopper", home._stopper), tools=[sdk_body(home.slow), sdk_body(home.after)])
    waiter = Agent(name="waiter", model=ScriptedModel(home, "waiter", home._waiter), tools=[sdk_body(home.after)])
    clienty = hx.from_openai_agents(Agent(name="clienty", model=ScriptedModel(home, "clienty", home._clienty), tools=[sdk_body(home.note)]),
                                    client_tools=[home.ask_user])
    swapped = {"approver": approver, "clienty": clienty, "stopper": stopper, "waiter": waiter}
    return [swapped.get(a.name, a) for a in home.AGENTS]
