"""A real OTLP/HTTP trace receiver on loopback: what a collector would get, decoded with opentelemetry-proto.

The tests point a child process's ``HELIX_DBOS_OTLP_TRACES_ENDPOINTS`` at it, kill and relaunch the
child, and judge the spans that really crossed the wire (not an in-process exporter's view).
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.waiting import wait_for


@dataclass(frozen=True)
class Received:
    """One exported span, as the collector sees it (ids as ints, attributes as plain values)."""

    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    scope: str
    service: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind is not None else None


def decode(body: bytes) -> list[Received]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out: list[Received] = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(Received(
                    trace_id=int.from_bytes(s.trace_id, "big"),
                    span_id=int.from_bytes(s.span_id, "big"),
                    parent_id=int.from_bytes(s.parent_span_id, "big") if s.parent_span_id else None,
                    name=s.name,
                    scope=ss.scope.name,
                    service=str(resource.get("service.name", "")),
                    attributes={a.key: _value(a.value) for a in s.attributes},
                    start_ns=s.start_time_unix_nano,
                    end_ns=s.end_time_unix_nano,
                ))
    return out


@dataclass
class Receiver:
    """The spans received so far, in arrival order, with the time each export request arrived."""

    url: str = ""
    spans: list[Received] = field(default_factory=list)
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (time.time(), spans in the request)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, spans: list[Received]) -> None:
        with self.lock:
            self.spans.extend(spans)
            self.arrivals.append((time.time(), len(spans)))

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, what: str, check: Callable[[list[Received]], bool], timeout: float = 120) -> list[Received]:
        """The spans received once ``check`` holds for them (``tests.support.waiting.wait_for``'s
        order); a timeout names the spans that did arrive."""
        try:
            (spans,) = wait_for(what, lambda: ((spans,) if check(spans := self.snapshot()) else None), timeout)  # a 1-tuple: true even when no span is what was awaited
            return spans
        except AssertionError as exc:
            raise AssertionError(f"{exc}; received {sorted(s.name for s in self.snapshot())}") from None


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on 127.0.0.1 (``/v1/traces``, protobuf, gzip or plain), for the test's length."""
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path.rstrip("/") != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            got.add(decode(body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def problems(spans: list[Received], trace_id: int) -> list[str]:
    """Why ``spans`` are not one well-formed trace with id ``trace_id``: other trace ids, no or
    several roots, spans whose parent never arrived (empty list: one trace, one root, no orphans)."""
    found: list[str] = []
    others = sorted({(s.name, s.scope) for s in spans if s.trace_id != trace_id})
    if others:
        found.append(f"spans in other traces: {others}")
    mine = [s for s in spans if s.trace_id == trace_id]
    roots = [s for s in mine if s.parent_id is None]
    if len(roots) != 1:
        found.append(f"{len(roots)} roots: {[(s.name, s.scope) for s in roots]}")
    ids = {s.span_id for s in mine}
    orphans = [(s.name, s.scope) for s in mine if s.parent_id is not None and s.parent_id not in ids]
    if orphans:
        found.append(f"orphans (parent never exported): {orphans}")
    return found
