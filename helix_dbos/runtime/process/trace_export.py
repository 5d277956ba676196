"""Getting a run's spans out of the process: helix's own OTLP exporter, flushed where outcomes commit.

``HELIX_DBOS_OTLP_TRACES_ENDPOINTS`` installs OpenTelemetry's batch span processor with an OTLP/HTTP
exporter per endpoint, on the process's SDK tracer provider (one is created if the app set none).
Not DBOS's: DBOS's exporter would also export DBOS's own spans, a workflow span per process per run
(a second trace, which a kill leaves unended) and a step span on every replay of a recorded step
(work done before a crash, emitted again). With DBOS's OTLP off, DBOS opens no span at all.

A batch processor exports on a timer (5 s by default), and a kill loses its queue. So the runtime
flushes where an outcome has just been committed (an entry prepared, a model reply appended, a
call's result written, a step committed, a run ended): what a relaunch will not redo is on its way
before the workflow goes on. The workflow waits for that flush at most ``FLUSH_WAIT`` seconds; while
a flush is overdue (the collector is down) it does not wait at all. SIGTERM flushes before the
process dies of it; ``Runtime.shutdown()`` flushes and stops the processors; SIGINT ends in
``shutdown()`` (or the SDK's own exit hook). A SIGKILL loses what ended since the last flush and
every span still open (docs/operations.md, "Traces across kills").
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import FrameType
from typing import Any, Final

from opentelemetry import trace

from ...errors import ConfigurationError

ENV: Final = "HELIX_DBOS_OTLP_TRACES_ENDPOINTS"
#: How long a workflow waits for the flush after a commit, and a signal for the flush before dying.
FLUSH_WAIT: Final = 2.0
#: The signals that would end the process without Python's exit hooks (SIGINT raises KeyboardInterrupt).
_SIGNALS: Final = (signal.SIGTERM,)

log = logging.getLogger("helix_dbos")

_processors: list[Any] = []
_previous: dict[int, Any] = {}
_lock = threading.Lock()
_queued: Future[None] | None = None
_overdue = False
_flusher = ThreadPoolExecutor(1, thread_name_prefix="helix-trace-flush")


def install(urls: Sequence[str], service_name: str) -> None:
    """Export this process's spans to ``urls``; a flush before SIGTERM ends the process."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigurationError(f"{ENV} needs the otel extra (pip install 'helix-dbos[otel]'): {exc}") from exc
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider(resource=Resource.create({SERVICE_NAME: service_name})))
        provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise ConfigurationError(f"{ENV} needs OpenTelemetry's SDK tracer provider; the app installed a {type(provider).__name__}")
    for url in urls:
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=url))
        provider.add_span_processor(processor)
        _processors.append(processor)
    _catch_signals()


def uninstall() -> None:
    """Flush and stop the processors ``install`` added (``Runtime.shutdown``); other processors are
    flushed. Waits at most ``FLUSH_WAIT`` for each: a processor's own stop waits out its exporter."""
    flush_now()
    _release_signals()
    while _processors:
        stopping = _flusher.submit(_processors.pop().shutdown)
        try:
            stopping.result(FLUSH_WAIT)
        except Exception:
            log.debug("a span processor did not stop within %s s", FLUSH_WAIT, exc_info=True)


def _flush() -> None:
    global _overdue
    try:
        force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if force_flush is not None:
            force_flush()
    finally:
        _overdue = False


def _request() -> Future[None] | None:
    """A flush that starts after this call (a queued one not yet started is shared)."""
    global _queued
    if not _processors and not hasattr(trace.get_tracer_provider(), "force_flush"):
        return None
    with _lock:
        if _queued is None or _queued.running() or _queued.done():
            _queued = _flusher.submit(_flush)
        return _queued


def flush_now(timeout: float = FLUSH_WAIT) -> None:
    """Export every ended span now, waiting at most ``timeout`` (on the flusher thread: the caller
    may be a signal handler on a thread that holds a lock the export needs)."""
    fut = _request()
    if fut is None:
        return
    try:
        fut.result(timeout)
    except Exception:
        log.debug("spans not flushed within %s s", timeout, exc_info=True)


async def flushed() -> None:
    """After a commit: export every span ended so far before the workflow goes on (see the module doc)."""
    global _overdue
    fut = _request()
    if fut is None or _overdue:
        return
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), FLUSH_WAIT)
    except TimeoutError:
        _overdue = True  # the collector is slow or gone: later commits do not wait until a flush ends
        log.debug("spans not flushed within %s s; not waiting for flushes until one ends", FLUSH_WAIT)
    except Exception:
        log.debug("spans not flushed", exc_info=True)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    flush_now()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # the default: die of the signal, as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _catch_signals() -> None:
    """Flush before the previous handler (or the default death) of each signal in ``_SIGNALS``."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; such a process's signals are the app's to handle
    for sig in _SIGNALS:
        current = signal.getsignal(sig)
        if current is _on_signal:
            continue
        _previous[sig] = current
        signal.signal(sig, _on_signal)


def _release_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_previous.items()):
        if signal.getsignal(sig) is _on_signal:
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        del _previous[sig]
