"""The FastAPI app: one runtime per process, launched in the lifespan and shut down with it.

Launching in the lifespan (not at import) means ``uvicorn --reload``, OpenAPI generation and tests
can build the app without touching a database, and a relaunched process recovers its executor's
pending runs before it accepts a request. The security settings are read first, so a service that
would be exposed without authentication refuses to start before it touches anything.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

import helix_dbos

from ..runtime import Runtime
from . import errors, live, routes, ui
from .loader import load_runtime
from .middleware import Options, TrustedHosts
from .settings import ServiceSettings

DESCRIPTION = (
    "LLM agents as DBOS workflows over the Helix ledger. Start sessions, answer approvals and "
    "client tools, resume, retry and stop runs, and follow each session's events over SSE. "
    "Authenticate with `Authorization: Bearer <key>` or `X-API-Key: <key>` when the service has keys. "
    "Errors are `{error, code, detail}` with 400 (bad input), 401 (unauthenticated), 403 (role missing), "
    "404 (unknown, or another principal's), or 409 (running / stale)."
)
SWAGGER = "/static/swagger"


def _swagger_dir() -> str:
    import swagger_ui_bundle  # the assets ship in a wheel: /docs works offline, with no CDN

    return str(swagger_ui_bundle.swagger_ui_path)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, told the truth: bad input is our 400 ``ErrorBody``, never a 422."""
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    error_body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for path in spec.get("paths", {}).values():
        for method, op in path.items():
            responses = op.get("responses", {})
            if responses.pop("422", None) is not None and "400" not in responses:
                responses["400"] = {"description": "Bad Request", **error_body}
            if method == "post":  # routes.json_only: a body not declared JSON is refused unread
                responses.setdefault("415", {"description": "Unsupported Media Type: the body is not application/json", **error_body})
    schemas = spec.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    spec.setdefault("components", {})["securitySchemes"] = {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}, "bearer": {"type": "http", "scheme": "bearer"}}
    spec["security"] = [{"apiKey": []}, {"bearer": []}]
    app.openapi_schema = spec
    return spec


def create_app(runtime: Runtime | None = None, *, app_spec: str | None = None, settings: ServiceSettings | None = None, database_url: str | None = None) -> FastAPI:
    """The service over ``runtime``, or over the app ``HELIX_DBOS_APP`` (``app_spec``) names.

    ``database_url`` overrides the app's own choice (``helix-dbos serve --db``).
    """
    settings = settings or ServiceSettings.from_env()
    target = runtime if runtime is not None else load_runtime(app_spec, database_url=database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Every blocking call (ledger reads, entries, ``?wait=`` polls that hold a thread for up to
        # 300 s) runs in the loop's default executor; Python sizes it to the CPU count, far too few.
        threads = int(os.environ.get("HELIX_DBOS_HTTP_THREADS", "64"))
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=threads, thread_name_prefix="helix-http"))
        await target.launch_async()
        try:
            yield
        finally:
            await target.shutdown_async()

    app = FastAPI(title="helix-dbos", version=helix_dbos.__version__, description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = target
    app.state.service_settings = settings
    errors.install(app)
    app.include_router(routes.public)
    app.include_router(routes.router)
    app.include_router(live.router)
    app.include_router(ui.router)
    app.mount(SWAGGER, StaticFiles(directory=_swagger_dir()), name="swagger")
    app.mount(ui.STATIC, StaticFiles(directory=ui.static_dir()), name="ui-static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="helix-dbos API",
            swagger_js_url=f"{SWAGGER}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER}/favicon-32x32.png",
        )

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # Outermost last: Host check, then CORS (only when configured), then OPTIONS, then the routes.
    app.add_middleware(Options)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "Last-Event-ID"],
            allow_credentials=False,
        )
    app.add_middleware(TrustedHosts, settings=settings)
    return app
