"""The outer layers: trusted Host headers, and ``OPTIONS`` answered with the address's real methods.

The Host check stops DNS rebinding: a web page on ``evil.example`` that resolves its own name to
127.0.0.1 makes the browser send ``Host: evil.example``, which no allowed host matches. ``/healthz``
is exempt so load balancers probing by IP keep working; it shows no session data.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .settings import ServiceSettings

EXEMPT = ("/healthz",)


PROBED = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(routes: list[Any], scope: Scope) -> set[str]:
    """Every method some route accepts at this path (Starlette's own 405 names only the first route's).

    Each method is probed through the routes' own matching, so included routers and mounts count.
    """
    out: set[str] = set()
    for method in PROBED:
        probe = {**scope, "type": "http", "method": method}
        if any(route.matches(probe)[0] == Match.FULL for route in routes):
            out.add(method)
    return out


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class TrustedHosts:
    def __init__(self, app: ASGIApp, settings: ServiceSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") not in EXEMPT:
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not self.settings.host_allowed(host):
                body = {
                    "error": "This service does not answer for that host name.",
                    "code": "host_not_allowed",
                    "detail": {"host": host, "hint": "add it to HELIX_DBOS_ALLOWED_HOSTS"},
                }
                await _send_json(send, 400, body)
                return
        await self.app(scope, receive, send)


#: Methods whose body the service reads (``routes.BODY_METHODS``): a GET's body is never read.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length`` (the largest, if it came twice), or None when it has none."""
    values = [v for k, v in scope.get("headers") or [] if k == b"content-length"]
    lengths = [int(v) for v in values if v.strip().isdigit()]
    return max(lengths) if lengths else None


class BodyLimit:
    """Refuse a request body larger than ``max_request_bytes`` with 413 ``payload_too_large``, unread.

    A ``Content-Length`` over the limit is refused before a byte of the body is read; a body without
    one (``Transfer-Encoding: chunked``) is counted as it arrives and refused the moment it passes
    the limit, so neither ever sits in memory whole. A body within the limit is handed on as read
    (the routes would read it whole anyway). The response closes the connection: the rest of the
    body is never read.
    """

    def __init__(self, app: ASGIApp, settings: ServiceSettings) -> None:
        self.app = app
        self.settings = settings

    async def _refuse(self, send: Send, declared: int | None) -> None:
        limit = self.settings.max_request_bytes
        body = {
            "error": f"The request body is larger than this service takes ({limit} bytes).",
            "code": "payload_too_large",
            "detail": {"limit_bytes": limit, "content_length": declared, "setting": "HELIX_DBOS_MAX_REQUEST_BYTES"},
        }
        await _send_json(send, 413, body, [(b"connection", b"close")])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = self.settings.max_request_bytes
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(send, declared)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body ended
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(send, declared)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then what the server says next (a disconnect)

        await self.app(scope, replay, send)


class Options:
    """``OPTIONS`` on any address: 204 with ``Allow`` listing what the address accepts (404 if nothing).

    It sits inside the CORS layer, so a configured CORS policy answers preflights first; without one a
    preflight gets no ``Access-Control-*`` header and the browser refuses the cross-origin call.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        methods = allowed_methods(scope["app"].router.routes, scope)
        if not methods:
            await _send_json(send, 404, {"error": "There is nothing at this address.", "code": "not_found", "detail": None})
            return
        allow = ", ".join(sorted(methods | {"OPTIONS"})).encode()
        await send({"type": "http.response.start", "status": 204, "headers": [(b"allow", allow)]})
        await send({"type": "http.response.body", "body": b""})
