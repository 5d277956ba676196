"""The workload under OpenAI's Agents SDK: its own DBOS integration (``dbos-openai-agents``) and helix.

The same shape as the pydantic-ai systems (5 steps x 3 calls, then a text answer) through the SDK's
own types: a scripted ``agents.Model`` (free, instant, deterministic, answering from the
``function_call_output`` items it is sent, as a provider would) and the workload's bodies as
``@function_tool``s. Two runners:

- ``dbos_openai_agents``: ``DBOSRunner.run`` inside a ``@DBOS.workflow``, as its README shows:
  each model request a DBOS step, function tools left as workflow code (its defaults);
- ``helix_openai_agents``: the same ``agents.Agent`` given to ``hx.Runtime`` (its bodies
  ``replay="safe"``, as ``bench.systems.helix`` marks the pydantic-ai ones), run by the bench's one
  helix runtime (``HelixRunner``), since a process holds one.

The answer names how many tool results the model was sent, so a runner that did not feed them back
answers wrong (``expected_answer``).
"""

from __future__ import annotations

import json
from typing import Any

from bench.workload import TOOL_FUNCTIONS, Runner, WorkloadSpec, tool_args

AGENT_NAME = "bench_oai"
WORKFLOW_NAME = "bench.oai.agent_run"


def expected_answer(spec: WorkloadSpec) -> str:
    return f"done: {spec.steps} steps, {spec.tool_calls} tool results"


def _outputs(items: Any) -> int:
    """How many tool results a request carries (SDK input items: dicts or models)."""
    if isinstance(items, str):
        return 0
    n = 0
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        n += kind == "function_call_output"
    return n


def make_model(spec: WorkloadSpec) -> Any:
    """A scripted ``agents.Model``: a step's calls while fewer than ``spec.tool_calls`` results came back, then the answer."""
    from agents import Model, ModelResponse, Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    names = list(TOOL_FUNCTIONS)

    class ScriptedModel(Model):
        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,  # noqa: A002 - the SDK's name
                               handoffs: Any, tracing: Any, *, previous_response_id: Any = None, conversation_id: Any = None, prompt: Any = None) -> Any:
            seen = _outputs(input)
            step = seen // spec.tools_per_step
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            if step < spec.steps:
                calls = [ResponseFunctionToolCall(type="function_call", name=names[i % len(names)], call_id=f"c{step}_{i}", id=f"fc{step}_{i}",
                                                  arguments=json.dumps(tool_args(names[i % len(names)], step, i)))
                         for i in range(spec.tools_per_step)]
                return ModelResponse(output=list(calls), usage=usage, response_id=None)
            text = ResponseOutputText(type="output_text", text=f"done: {step} steps, {seen} tool results", annotations=[])
            message = ResponseOutputMessage(type="message", id="msg", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench does not stream")

    return ScriptedModel()


def make_agent(spec: WorkloadSpec, safe: bool = False) -> Any:
    """The SDK agent: scripted model, the workload's bodies as function tools (``safe``: marked
    ``replay="safe"`` for helix; the peer has no such notion)."""
    from agents import Agent, function_tool

    import helix_dbos as hx

    tools = []
    for name, fn in TOOL_FUNCTIONS.items():
        tool = function_tool(fn, name_override=name)
        tools.append(hx.openai_policy(replay="safe")(tool) if safe else tool)
    return Agent(name=AGENT_NAME, model=make_model(spec), tools=tools)


def make_peer_runner(spec: WorkloadSpec) -> Runner:
    """``dbos-openai-agents``: register the workflow (after ``configure_dbos(..., launch=False)``)."""
    import importlib

    import dbos_openai_agents.runner
    from agents import set_tracing_disabled
    from dbos import DBOS

    # Its model step is a module-level @DBOS.step, registered with the DBOS of its first import: a
    # second DBOS in the process (the bench's next database) needs it registered again.
    DBOSRunner = importlib.reload(dbos_openai_agents.runner).DBOSRunner

    set_tracing_disabled(True)  # no trace export to OpenAI's servers from a benchmark
    agent = make_agent(spec)

    @DBOS.workflow(name=WORKFLOW_NAME)
    async def oai_agent_run(prompt: str) -> str:
        result = await DBOSRunner.run(agent, prompt, max_turns=spec.model_requests + 5)
        return str(result.final_output)

    async def run() -> str:
        return await oai_agent_run(spec.prompt)

    run.workflow = oai_agent_run  # type: ignore[attr-defined]
    run.workflow_name = WORKFLOW_NAME  # type: ignore[attr-defined]
    return run


class HelixOpenAIRunner:
    """The SDK agent's runs on a ``HelixRunner``'s runtime (which was given ``make_agent(spec, safe=True)``)."""

    def __init__(self, spec: WorkloadSpec, helix: Any) -> None:
        self.spec, self.helix = spec, helix
        self.last_run_id: str | None = None

    def __call__(self) -> Any:
        result = self.helix.runtime.start(AGENT_NAME, self.spec.prompt).result()
        self.last_run_id = result.run_id
        if result.status != "completed":
            raise RuntimeError(f"helix run ended {result.status}: {result.error_code} {result.error}")
        return result.output
