"""OpenTelemetry traces: one trace per run, a span per model request, append, body attempt, commit.

Off by default: spans go to whatever tracer provider the process has, and OpenTelemetry's default
is a no-op. DBOS's OTLP settings (``enable_otlp`` with the ``otel`` extra) install one, as does any
provider the app sets before ``launch()``.

One trace per run, across processes: the trace id is derived from the run id, so the spans of a run
recovered in another process land in the same trace. A span is opened only where the work really
happens (inside the DBOS step or transaction), so a workflow replay that returns recorded outputs
emits nothing twice.

The trace's root is a real span, ``helix.run``, with the span id every other span names as its
parent (also derived from the run id). A span that a killed process opened is never exported, so
the root is not held open across the run: the process whose workflow execution ends the run (the
relaunching one, after a crash) emits it whole, from the run's ``created_at`` to its ``ended_at``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from ...ledger.records import RunRow

TRACER = "helix_dbos"

# The span names, for trace viewers and their queries. Not data: nothing helix runs reads one back
# (the names a restarted process must find again are ``ledger/names.py``'s). A span named like a
# ledger transaction (``helix.prepare``, ``helix.append``) is the transaction's span, but its own name.
#: The run's root span, emitted whole by the process whose execution ends the run.
RUN_SPAN = "helix.run"
#: An entry's preparation transaction.
PREPARE_SPAN = "helix.prepare"
#: One model request.
MODEL_REQUEST_SPAN = "helix.model_request"
#: The append checkpoint of a step that starts bodies.
APPEND_SPAN = "helix.append"
#: One attempt of one tool body.
BODY_ATTEMPT_SPAN = "helix.body_attempt"
#: A step's commit.
STEP_COMMIT_SPAN = "helix.step_commit"
#: The prefix of every attribute helix puts on a span.
ATTRIBUTE_PREFIX = "helix."

C = TypeVar("C")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def trace_id_of(run_id: str) -> int:
    """The run's trace id: stable in every process, never zero."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:32], 16) or 1


def root_span_id_of(run_id: str) -> int:
    """The span id of the run's ``helix.run`` span, the parent of every other span of the run."""
    return int(hashlib.sha256(f"{run_id}:root".encode()).hexdigest()[:16], 16) or 1


@functools.lru_cache(maxsize=1024)
def _run_context(run_id: str) -> Context:
    """The run's root as a (remote) parent. Cached: every span of a run is opened in it (two
    SHA-256s and three objects each time otherwise); a ``Context`` is immutable, so sharing it is safe."""
    parent = SpanContext(trace_id_of(run_id), root_span_id_of(run_id), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


class _FixedIds:
    """An id generator that hands out the run's own trace and root span ids (one span's worth)."""

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id

    def is_trace_id_random(self) -> bool:  # derived from the run id, not random (the W3C flag says so)
        return False


def _root_tracer(run_id: str) -> Any | None:
    """The SDK tracer, copied with the run's ids; None when no SDK provider records spans (the
    no-op default, or a provider that mints its own ids: then the root is missing, as before)."""
    tracer = trace.get_tracer_provider().get_tracer(TRACER)
    if not hasattr(tracer, "id_generator"):
        return None
    root = copy.copy(tracer)
    root.id_generator = _FixedIds(trace_id_of(run_id), root_span_id_of(run_id))
    return root


def _ns(when: datetime | None) -> int:
    if when is None:
        return time.time_ns()
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1e9)


def enabled() -> bool:
    """Whether an SDK provider records this process's spans (the root span's read is skipped if not)."""
    return hasattr(trace.get_tracer_provider().get_tracer(TRACER), "id_generator")


def emit_run_span(run: RunRow, **attrs: object) -> None:
    """The run's root span, start to end, with the ids its children already name as their parent."""
    tracer = _root_tracer(run["run_id"])
    if tracer is None:
        return
    fields = {"run_id": run["run_id"], "session_id": run["session_id"], "agent": run["agent_name"], "entry": run["entry"],
              "status": run["status"], "steps": run["steps"], "error_code": run["error_code"], **attrs}
    s = tracer.start_span(RUN_SPAN, context=Context(), attributes=_clean(fields), start_time=_ns(run["created_at"]))
    # ended now, not at ``ended_at``: the span of the transaction that wrote ``ended_at`` ends after it
    s.end(end_time=max(time.time_ns(), _ns(run["created_at"])))


def _clean(attrs: Mapping[str, object]) -> dict[str, AttributeValue]:
    """Our attributes under ``helix.``; a value OpenTelemetry cannot carry (None, a dict) is left out."""
    return {f"{ATTRIBUTE_PREFIX}{k}": v for k, v in attrs.items() if isinstance(v, (str, bool, int, float))}


@contextmanager
def span(name: str, run_id: str, **attrs: object) -> Iterator[Span]:
    """A span of the run's trace (a no-op without a tracer provider)."""
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(name, context=_run_context(run_id), attributes=_clean({"run_id": run_id, **attrs})) as s:
        yield s


@contextmanager
def span_since(name: str, run_id: str, start_ns: int, **attrs: object) -> Iterator[Span]:
    """A span of the run's trace that started at ``start_ns``, opened only now that it is known to
    be real work, and not made current (code inside parents its spans to the run's root)."""
    s = trace.get_tracer(TRACER).start_span(name, context=_run_context(run_id), attributes=_clean({"run_id": run_id, **attrs}), start_time=start_ns)
    try:
        yield s
    except BaseException as exc:
        s.record_exception(exc)
        s.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
        raise
    finally:
        s.end()


@contextmanager
def in_run(run_id: str) -> Iterator[None]:
    """Make the run's root the current span: whatever the run's execution opens without a parent of
    its own (an MCP toolset's listing and calls, the app's spans in a tool) lands under it."""
    token = otel_context.attach(_run_context(run_id))
    try:
        yield
    finally:
        otel_context.detach(token)


def annotate(s: Span, **attrs: object) -> None:
    s.set_attributes(_clean(attrs))


def traced(name: str, fn: Callable[[C, *Ts], T], run_id: str, outcome: Callable[[T], Mapping[str, object]] | None = None, **attrs: object) -> Callable[[C, *Ts], T]:
    """``fn(conn, *args)`` inside a span: handed to ``durable.tx``, it runs only when DBOS executes the
    transaction (a replay returns the recorded output without calling it, so no span twice).
    ``outcome`` picks the span's attributes from ``fn``'s output (a record) once it returns."""

    def run(conn: C, *args: *Ts) -> T:
        with span(name, run_id, **attrs) as s:
            out = fn(conn, *args)
            if outcome is not None and out is not None:
                annotate(s, **outcome(out))
            return out

    return run
