"""OpenTelemetry traces: one trace per run, a span per model request, append, body attempt, commit.

Off by default: spans go to whatever tracer provider the process has, and OpenTelemetry's default
is a no-op. DBOS's OTLP settings (``enable_otlp`` with the ``otel`` extra) install one, as does any
provider the app sets before ``launch()``.

One trace per run, across processes: the trace id is derived from the run id, so the spans of a run
recovered in another process land in the same trace. A span is opened only where the work really
happens (inside the DBOS step or transaction), so a workflow replay that returns recorded outputs
emits nothing twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

TRACER = "helix_dbos"


def trace_id_of(run_id: str) -> int:
    """The run's trace id: stable in every process, never zero."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:32], 16) or 1


def _run_context(run_id: str) -> Context:
    root_span_id = int(hashlib.sha256(f"{run_id}:root".encode()).hexdigest()[:16], 16) or 1
    parent = SpanContext(trace_id_of(run_id), root_span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {f"helix.{k}": v for k, v in attrs.items() if isinstance(v, (str, bool, int, float))}


@contextmanager
def span(name: str, run_id: str, **attrs: Any) -> Iterator[Span]:
    """A span of the run's trace (a no-op without a tracer provider)."""
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(name, context=_run_context(run_id), attributes=_clean({"run_id": run_id, **attrs})) as s:
        yield s


def annotate(s: Span, **attrs: Any) -> None:
    s.set_attributes(_clean(attrs))


def traced(name: str, fn: Callable[..., Any], run_id: str, outcome: Callable[[Any], dict[str, Any]] | None = None, **attrs: Any) -> Callable[..., Any]:
    """``fn(conn, *args)`` inside a span: handed to ``durable.tx``, it runs only when DBOS executes the
    transaction (a replay returns the recorded output without calling it, so no span twice)."""

    def run(conn: Any, *args: Any) -> Any:
        with span(name, run_id, **attrs) as s:
            out = fn(conn, *args)
            if outcome is not None and isinstance(out, dict):
                annotate(s, **outcome(out))
            return out

    return run
