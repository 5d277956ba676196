"""OpenTelemetry: one trace per run, a span per model request, append, body attempt and step commit,
with the dispatch id, attempt, policy and recovery decision as attributes (in-memory exporter)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import helix_dbos as hx  # noqa: E402
from helix_dbos.runtime.process.config import Settings  # noqa: E402
from helix_dbos.runtime.process.tracing import root_span_id_of, trace_id_of  # noqa: E402


def _run_spans(spans: InMemorySpanExporter, run_id: str, wait: float = 10.0) -> list[Any]:
    """The run's finished spans, once its root is among them (it ends when the workflow returns,
    a moment after the result is readable)."""
    deadline = time.monotonic() + wait
    while True:
        mine = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("helix.run_id") == run_id]
        if any(s.name == "helix.run" for s in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.02)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)  # type: ignore[attr-defined]
    yield exporter
    processor.shutdown()


def test_one_trace_per_run_with_span_per_boundary(make_runtime: Any, spans: InMemorySpanExporter) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("look", {"key": "a"}, "c1"), ToolCallPart("send", {"key": "b"}, "c2")])
        return ModelResponse(parts=[TextPart("done")])

    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    @hx.tool
    def send(key: str) -> str:
        return key

    rt = make_runtime([hx.Agent("traced", FunctionModel(reply), tools=[look, send])])
    result = rt.start("traced", "go").result(timeout=60)
    assert result.status == "completed"
    mine = _run_spans(spans, result.run_id)
    names = sorted(s.name for s in mine)
    assert names == sorted(["helix.run", "helix.prepare", "helix.model_request", "helix.model_request", "helix.append",
                            "helix.body_attempt", "helix.body_attempt", "helix.step_commit", "helix.step_commit"])
    assert {s.context.trace_id for s in mine} == {trace_id_of(result.run_id)}  # one trace, the same in any process
    # a real root: every span's parent is a span of the trace, and the root has none
    (root,) = [s for s in mine if s.name == "helix.run"]
    assert root.parent is None and root.context.span_id == root_span_id_of(result.run_id)
    exported = {s.context.span_id for s in mine}
    assert all(s.parent.span_id in exported for s in mine if s is not root)
    assert root.attributes["helix.status"] == "completed" and root.attributes["helix.agent"] == "traced"
    assert all(root.start_time <= s.start_time and s.end_time <= root.end_time for s in mine)
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    bodies = {s.attributes["helix.tool"]: s.attributes for s in mine if s.name == "helix.body_attempt"}
    assert bodies["look"]["helix.policy"] == "safe" and bodies["send"]["helix.policy"] == "unsafe"
    assert bodies["look"]["helix.dispatch_id"] == calls["look"].dispatch_id
    assert bodies["send"]["helix.attempt"] == 1 and bodies["send"]["helix.decision"] == "run"
    assert bodies["send"]["helix.status"] == "ok"
    models = [s.attributes for s in mine if s.name == "helix.model_request"]
    assert sorted(m["helix.step"] for m in models) == [0, 1] and {m["helix.calls"] for m in models} == {2, 0}
    commits = [s.attributes for s in mine if s.name == "helix.step_commit"]
    assert sorted(c["helix.saved"] for c in commits) == [False, True]


def test_otlp_endpoints_leave_dbos_otlp_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HELIX_DBOS_OTLP_TRACES_ENDPOINTS`` is helix's own exporter (``process/trace_export.py``):
    DBOS's OTLP stays off, so DBOS opens none of its own spans (a workflow span per process, a step
    span per replay), and the endpoints are read as the comma-separated list they are."""
    from dbos._dbos_config import translate_dbos_config_to_config_file

    from helix_dbos.settings import from_environ

    settings = Settings("sqlite:///unused.sqlite", "ex", "v1")
    monkeypatch.setenv("HELIX_DBOS_OTLP_TRACES_ENDPOINTS", "http://127.0.0.1:4318/v1/traces, http://otel:4318/v1/traces")
    on = translate_dbos_config_to_config_file(settings.dbos_config())  # type: ignore[arg-type]
    assert on["telemetry"]["disable_otlp"] is True and on["telemetry"]["OTLPExporter"]["tracesEndpoint"] == []
    assert from_environ().otlp_traces_endpoints == ("http://127.0.0.1:4318/v1/traces", "http://otel:4318/v1/traces")
