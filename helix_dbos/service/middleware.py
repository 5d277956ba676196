"""The outer layers: trusted Host headers, and ``OPTIONS`` answered with the address's real methods.

The Host check stops DNS rebinding: a web page on ``evil.example`` that resolves its own name to
127.0.0.1 makes the browser send ``Host: evil.example``, which no allowed host matches. ``/healthz``
is exempt so load balancers probing by IP keep working; it shows no session data.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

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
