"""The OpenAI Agents SDK's spans in the run's one OpenTelemetry trace (in-memory exporter, both
databases, the SDK's own chat and Responses models on the loopback provider).

The adapter opens what the SDK's runner would (agent, guardrail, function spans; the model its own
generation/response span) and helix's ``TracingProcessor`` bridges each into an OpenTelemetry span
under the run's trace; the SDK's default processor (export to OpenAI's backend) is not registered.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from agents import (  # noqa: E402
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import helix_dbos as hx  # noqa: E402
from helix_dbos.runtime.process.tracing import root_span_id_of, trace_id_of  # noqa: E402
from tests.runtime.test_openai_agents import SDK_WIRES, sdk_model  # noqa: E402
from tests.runtime.test_tracing import spans  # noqa: E402, F401  (the fixture)
from tests.support.provider_server import Calls, Text, provider_server  # noqa: E402


@input_guardrail
def on_topic(ctx: RunContextWrapper[Any], agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info="fine", tripwire_triggered=False)


@output_guardrail
def short(ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=len(output), tripwire_triggered=False)


@hx.openai_policy(replay="safe")
@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _trace_of(spans: InMemorySpanExporter, run_id: str) -> list[Any]:  # noqa: F811
    """The run's trace once its root arrived (it ends when the workflow returns)."""
    deadline = time.monotonic() + 30
    while True:
        mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id_of(run_id)]
        if any(s.name == "helix.run" for s in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def _chain(span: Any, by_id: dict[int, Any]) -> list[str]:
    """The names of ``span``'s ancestors, nearest first (a parent that never arrived fails here)."""
    out = []
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        out.append(span.name)
    return out


def test_the_sdks_spans_are_children_of_the_runs_trace(make_runtime: Any, spans: InMemorySpanExporter) -> None:  # noqa: F811
    from agents.tracing import get_trace_provider
    from agents.tracing.processors import default_processor

    with provider_server() as server:
        agents = [Agent(name=f"traced_{w}", model=sdk_model(w, server), tools=[weather], input_guardrails=[on_topic], output_guardrails=[short])
                  for w in SDK_WIRES]
        rt = make_runtime(agents)
        registered = get_trace_provider()._multi_processor._processors  # type: ignore[attr-defined]
        assert default_processor() not in registered, "the SDK's export to OpenAI's backend is on"
        for wire, model_span in (("chat", "agents.generation"), ("responses", "agents.response")):
            server.script(Calls([("weather", {"city": "Oslo"})]), Text("sunny"))
            result = rt.start(f"traced_{wire}", "weather in Oslo?").result(timeout=120)
            assert result.status == "completed", result
            mine = _trace_of(spans, result.run_id)
            by_id = {s.context.span_id: s for s in mine}
            (root,) = [s for s in mine if s.name == "helix.run"]
            assert root.context.span_id == root_span_id_of(result.run_id)
            sdk = [s for s in mine if s.instrumentation_scope.name == "openai_agents"]
            names = sorted(s.name for s in sdk)
            assert names.count(model_span) == 2, (wire, names)  # one per model request, opened by the SDK's model
            assert names.count("agents.function weather") == 1 and names.count("agents.guardrail on_topic") == 1, names
            assert names.count("agents.guardrail short") == 1 and f"agents.agent traced_{wire}" in names, names
            for s in sdk:  # under helix's spans, ending at the run's root
                above = _chain(s, by_id)
                assert above[-1] == "helix.run", (s.name, above)
                if s.name == model_span or s.name.startswith("agents.guardrail"):
                    assert "helix.model_request" in above, (s.name, above)
            (fn,) = [s for s in sdk if s.name == "agents.function weather"]
            assert fn.attributes["openai_agents.output"] == "sunny in Oslo" and '"Oslo"' in fn.attributes["openai_agents.input"]
            (guard,) = [s for s in sdk if s.name == "agents.guardrail short"]
            assert guard.attributes["openai_agents.triggered"] is False


def test_a_handoff_is_a_handoff_span_in_the_runs_trace(make_runtime: Any, spans: InMemorySpanExporter) -> None:  # noqa: F811
    """The handoff's body opens the SDK's ``handoff`` span (from the agent that asked, to the one handed
    to) under the run's root, as the SDK's runner does when the model hands off."""
    with provider_server() as server:
        billing = Agent(name="billing", model=sdk_model("chat", server), instructions="You take payments.")
        rt = make_runtime([Agent(name="triage", model=sdk_model("chat", server), handoffs=[billing])])
        server.script(Calls([("transfer_to_billing", {})]), Text("paid"))
        result = rt.start("triage", "pay my bill").result(timeout=120)
        assert (result.status, result.output) == ("completed", "paid"), result
        mine = _trace_of(spans, result.run_id)
        by_id = {s.context.span_id: s for s in mine}
        (handoff,) = [s for s in mine if s.name == "agents.handoff"]
        assert (handoff.attributes["openai_agents.from_agent"], handoff.attributes["openai_agents.to_agent"]) == ("triage", "billing")
        assert _chain(handoff, by_id)[-1] == "helix.run"
