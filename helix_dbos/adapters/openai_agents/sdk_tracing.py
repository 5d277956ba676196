"""The OpenAI Agents SDK's tracing, bridged into the run's one OpenTelemetry trace.

The SDK traces through its own processors (``agents.tracing``), and its default one exports to
OpenAI's backend. Under helix the runner does not run, so the adapter opens what the runner would:
an SDK trace and the agent's span around each model request (the model's own ``generation`` /
``response`` span inside it), each guardrail run (``guardrail`` spans) and each tool body
(``function`` span). ``Bridge``, a ``TracingProcessor``, turns every SDK span into an OpenTelemetry
span of the tracer ``openai_agents``, parented to its SDK parent's, or (the outermost) to whatever
OpenTelemetry span is current: helix's ``helix.model_request`` in a model step, the run's root in
a body. So the SDK's spans land in the run's trace, whatever process runs the step.

``install`` (called when the first ``agents.Agent`` is read) adds the bridge and takes the SDK's
default processor out, so nothing goes to OpenAI's backend unless the app asks for it: an app that
wants it adds it back after building the runtime (``agents.add_trace_processor(
agents.tracing.processors.default_processor())``); processors the app registered itself stay.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...definitions.context import RunScope

#: The OpenTelemetry tracer (instrumentation scope) the SDK's spans are exported under.
TRACER = "openai_agents"
#: Every attribute the bridge sets starts with this.
ATTRIBUTE_PREFIX = "openai_agents."
#: A longer attribute value (a generation's whole input, say) is cut to this many characters.
MAX_VALUE = 8192

_lock = threading.Lock()
_bridge: Any = None


def _attr(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value[:MAX_VALUE] if isinstance(value, str) else value
    return json.dumps(value, ensure_ascii=False, default=str)[:MAX_VALUE]


def _make_bridge() -> Any:
    from agents.tracing import TracingProcessor
    from opentelemetry import trace as otel

    class Bridge(TracingProcessor):
        """SDK spans as OpenTelemetry spans, started and ended with them, parents kept."""

        def __init__(self) -> None:
            self._open: dict[str, Any] = {}

        def on_trace_start(self, trace: Any) -> None:  # the run's root is helix's: an SDK trace is no span
            return None

        def on_trace_end(self, trace: Any) -> None:
            return None

        def on_span_start(self, span: Any) -> None:
            parent = self._open.get(span.parent_id) if span.parent_id else None
            context = otel.set_span_in_context(parent) if parent is not None else None  # None: the current span
            data = span.span_data
            self._open[span.span_id] = otel.get_tracer(TRACER).start_span(
                _name(data.type, data.export()), context=context, attributes={f"{ATTRIBUTE_PREFIX}span_type": data.type})

        def on_span_end(self, span: Any) -> None:
            o = self._open.pop(span.span_id, None)
            if o is None:
                return
            exported = span.span_data.export()
            o.update_name(_name(span.span_data.type, exported))
            o.set_attributes({f"{ATTRIBUTE_PREFIX}{k}": _attr(v) for k, v in exported.items() if v is not None and k != "type"})
            if span.error:
                o.set_status(otel.Status(otel.StatusCode.ERROR, str(span.error.get("message", ""))))
            o.end()

        def shutdown(self) -> None:
            return None

        def force_flush(self) -> None:
            return None

    return Bridge()


def _name(kind: str, exported: dict[str, Any]) -> str:
    name = exported.get("name")
    return f"agents.{kind} {name}" if isinstance(name, str) and name else f"agents.{kind}"


def install() -> Any:
    """Add the bridge to the SDK's processors (once per process) and take the SDK's default
    processor (export to OpenAI's backend) out; the bridge is returned."""
    global _bridge
    with _lock:
        if _bridge is not None:
            return _bridge
        from agents.tracing import get_trace_provider, set_trace_processors
        from agents.tracing.processors import default_processor

        bridge = _make_bridge()
        # the SDK keeps its processors privately: read them when it can, to keep the app's own
        registered = getattr(getattr(get_trace_provider(), "_multi_processor", None), "_processors", None)
        kept = [p for p in registered or () if p is not default_processor()]
        set_trace_processors([*kept, bridge])
        _bridge = bridge
        return bridge


def sensitive() -> bool:
    """Whether model spans carry the request's input and output (the SDK's own switch and default)."""
    return os.environ.get("OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA", "true").lower() in ("true", "1")


@contextmanager
def in_sdk_trace(scope: RunScope, agent_name: str) -> Iterator[None]:
    """An SDK trace for the run (its id derived from the run id, its group the session) with the
    agent's span open, unless an SDK trace is already current."""
    from agents.tracing import agent_span, get_current_trace, trace

    if get_current_trace() is not None:
        yield
        return
    trace_id = "trace_" + hashlib.sha256(scope.run_id.encode()).hexdigest()[:32]
    with trace(agent_name, trace_id=trace_id, group_id=scope.session_id, metadata={"run_id": scope.run_id}), agent_span(name=agent_name):
        yield


@contextmanager
def guardrail(name: str) -> Iterator[Any]:
    from agents.tracing import guardrail_span

    with guardrail_span(name) as span:
        yield span


def triggered(span: Any, tripped: bool) -> None:
    span.span_data.triggered = tripped


@contextmanager
def handoff(from_agent: str, to_agent: str) -> Iterator[Any]:
    """A handoff body's ``handoff`` span, as the SDK's runner opens one when the model hands off."""
    from agents.tracing import handoff_span

    with handoff_span(from_agent=from_agent, to_agent=to_agent) as span:
        yield span


@contextmanager
def function(name: str, arguments: str) -> Iterator[Any]:
    """A tool body's ``function`` span (its output set by ``output``)."""
    from agents.tracing import function_span

    with function_span(name, input=arguments if sensitive() else None) as span:
        yield span


def output(span: Any, value: Any) -> None:
    if sensitive():
        span.span_data.output = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
