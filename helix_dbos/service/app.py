"""The FastAPI app: one runtime per process, launched in the lifespan and shut down with it.

Launching in the lifespan (not at import) means ``uvicorn --reload``, OpenAPI generation and tests
can build the app without touching a database, and a relaunched process recovers its executor's
pending runs before it accepts a request. The security settings are read first, so a service that
would be exposed without authentication refuses to start before it touches anything; so does one
whose agent's model provider cannot be loaded (``providers.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

import helix_dbos

from ..errors import HelixError
from ..ledger.engine import explain_database_error
from ..runtime import Runtime
from ..settings import from_environ
from . import errors, live, routes, ui
from .loader import load_runtime
from .middleware import BodyLimit, Options, TrustedHosts
from .providers import check_models
from .settings import ServiceSettings

DESCRIPTION = (
    "LLM agents as DBOS workflows over the Helix ledger. Start sessions, answer approvals and "
    "client tools, resume, retry and stop runs, and follow each session's events over SSE. "
    "Authenticate with `Authorization: Bearer <key>` or `X-API-Key: <key>` when the service has keys. "
    "Errors are `{error, code, detail}` with 400 (bad input), 401 (unauthenticated), 403 (role missing, "
    "or the `/ui` cookie without its CSRF token), 404 (unknown, or another principal's), 409 (running / stale), "
    "413 (`payload_too_large`: a body, a message or a client tool result over the service's limits, docs/service.md), "
    "415 (a POST body not declared `application/json`), 503 (`store_unavailable`: the database stayed "
    "unreachable past `store_retry_window`; nothing was applied, send it again), or 500 (unexpected)."
)
#: Where /docs loads Swagger UI from: fastapi-offline's wheel ships Swagger UI 5 (which reads the
#: OpenAPI 3.1 this service publishes; swagger-ui-bundle's 4.15 could not), so /docs needs no CDN.
SWAGGER = "/static/swagger"
#: Served without authentication (``routes.public``, the schema and its page): no security in the schema.
UNAUTHENTICATED = frozenset({"/healthz"})
#: Operations that never read or write the database (the agents' catalog is the process's own): no 503.
STORELESS = frozenset({"/healthz", "/agents"})


def refusals(path: str, method: str) -> dict[str, str]:
    """The refusals an operation can answer whatever its route declares, by where each comes from
    (``errors.API_ERROR_CODES``): the Host check and the query check (400), the last-resort handler
    (500), authentication (401), a POST's media type (415) and its CSRF check (403), and the store
    (503). Routes declare only their own (``routes._errors``); tests/runtime/test_openapi_errors.py provokes
    each against the live service and fails on one the schema does not list."""
    out = {
        "400": "Bad Request: validation_error (a bad parameter or body, an unknown query parameter) or host_not_allowed",
        "500": "Internal Server Error: internal_error (anything unexpected; the log has the traceback)",
    }
    if path not in UNAUTHENTICATED:
        out["401"] = "Unauthorized: unauthenticated (no credentials, or not valid ones, on a service with authentication)"
    if method == "post":
        out["415"] = "Unsupported Media Type: unsupported_media_type (the body is not application/json)"
        out["413"] = ("Content Too Large: payload_too_large (the body is over HELIX_DBOS_MAX_REQUEST_BYTES, a message or a client "
                      "tool error over HELIX_DBOS_MAX_MESSAGE_CHARS, a client tool result over HELIX_DBOS_MAX_RESULT_BYTES; nothing was stored)")
        if path not in UNAUTHENTICATED:
            out["403"] = "Forbidden: forbidden (a role missing), or csrf_failed (the /ui cookie without its CSRF token)"
    if path not in STORELESS:
        out["503"] = ("Service Unavailable: store_unavailable (the database stayed unreachable past store_retry_window; "
                      "nothing was applied, and the same request may be sent again)")
    return out


#: The request fields ``HELIX_DBOS_MAX_MESSAGE_CHARS`` bounds, by schema (``routes.check_sizes``).
LIMITED_TEXT = {
    "StartSession": "message", "NewTurn": "message", "ResumeWithMessage": "message", "RetryRecover": "message",
    "RetryFromCheckpoint": "message", "ClientFailed": "error",
}


def publish_limits(schemas: dict[str, Any], settings: ServiceSettings) -> None:
    """Put this service's configured size limits in the request schemas: ``maxLength`` on each
    message, and the result's byte limit in its description (JSON Schema cannot count bytes)."""
    for name, field in LIMITED_TEXT.items():
        prop = schemas.get(name, {}).get("properties", {}).get(field)
        if prop is None:
            continue
        target = next((m for m in prop.get("anyOf", []) if m.get("type") == "string"), prop)  # ``str | None``
        target["maxLength"] = settings.max_message_chars
    result = schemas.get("ClientOk", {}).get("properties", {}).get("result")
    if result is not None:
        result["description"] = f"{result.get('description', '')} At most {settings.max_result_bytes} bytes as JSON (a 413 beyond).".strip()


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, told the truth, in a shape client generators take whole.

    Bad input is our 400 ``ErrorBody``, never a 422, and a POST body not declared JSON a 415. Every
    request body is required and carries no ``default`` (openapi-python-client drops an endpoint
    whose ``oneOf`` body has one: "ModelProperty cannot have a default value"), so a generated
    client's callers pass the member they mean (``ResumeContinue()``, ``RetryRecover()``, ``Stop()``).
    Operations served without authentication say so with an empty ``security``.
    """
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    error_body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for route, path in spec.get("paths", {}).items():
        for method, op in path.items():
            responses = op.get("responses", {})
            responses.pop("422", None)  # our 400 (errors._request_validation)
            for status, description in refusals(route, method).items():
                responses.setdefault(status, {"description": description, **error_body})
            body = op.get("requestBody")
            if body is not None:
                # json_only refuses a POST without a JSON body, so every body is required (``{}`` where
                # no field is needed), and none carries a default: openapi-python-client drops an
                # endpoint whose oneOf body has one, and cannot send an omitted union at all.
                body["required"] = True
                for media in body.get("content", {}).values():
                    media.get("schema", {}).pop("default", None)
            if route in UNAUTHENTICATED:
                op["security"] = []
    schemas = spec.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    publish_limits(schemas, app.state.service_settings)
    spec.setdefault("components", {})["securitySchemes"] = {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}, "bearer": {"type": "http", "scheme": "bearer"}}
    spec["security"] = [{"apiKey": []}, {"bearer": []}]
    app.openapi_schema = spec
    return spec


def refusal(exc: BaseException) -> HelixError | None:
    """A launch's failure as the typed refusal it is (a driver's connection error explained), or None."""
    if isinstance(exc, HelixError):
        return exc
    return explain_database_error(exc) if type(exc).__module__.startswith(("dbos", "psycopg", "sqlalchemy")) else None


def create_app(runtime: Runtime | None = None, *, app_spec: str | None = None, settings: ServiceSettings | None = None, database_url: str | None = None,
               front_end: bool = False) -> FastAPI:
    """The service over ``runtime``, or over the app ``HELIX_DBOS_APP`` (``app_spec``) names.

    ``database_url`` overrides the app's own choice (``helix-dbos serve --db``); ``front_end``
    (``serve --front-end``) launches a runtime that names no mode as a front end (``mode="client"``).
    ``settings``: read from the environment here when the caller (the CLI) did not.
    """
    settings = settings or ServiceSettings.from_env(environment=from_environ())
    target = runtime if runtime is not None else load_runtime(app_spec, database_url=database_url)
    if front_end and target.mode is None:
        target.mode = "client"
    check_models(target.agents)  # a provider package that is missing refuses the start, not each session

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Every blocking call (ledger reads, entries, ``?wait=`` polls that hold a thread for up to
        # 300 s) runs in the loop's default executor; Python sizes it to the CPU count, far too few.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=settings.http_threads, thread_name_prefix="helix-http"))
        try:
            await target.launch_async()
        except Exception as exc:  # a refused start: service/http.py prints it as one line, not uvicorn's traceback
            app.state.start_refused = refusal(exc)
            raise
        try:
            yield
        finally:
            await target.shutdown_async()

    # FastAPI with /docs on fastapi-offline's bundled Swagger UI (no ReDoc: one page, one bundle).
    app = FastAPIOffline(
        docs_url="/docs",
        redoc_url=None,
        static_url=SWAGGER,
        title="helix-dbos",
        version=helix_dbos.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # The validator badge would fetch validator.swagger.io: a page that works offline asks no one.
        # Operation ids are shown: they are the function names of a generated client.
        swagger_ui_parameters={"validatorUrl": None, "displayOperationId": True},
    )
    app.state.runtime = target
    app.state.service_settings = settings
    errors.install(app)
    app.include_router(routes.public)
    app.include_router(routes.router)
    app.include_router(live.router)
    app.include_router(ui.router)
    app.mount(ui.STATIC, StaticFiles(directory=ui.static_dir()), name="ui-static")

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # Outermost last: Host check, then the body's size, then CORS (only when configured), then OPTIONS, then the routes.
    app.add_middleware(Options)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "Last-Event-ID"],
            allow_credentials=False,
        )
    app.add_middleware(BodyLimit, settings=settings)
    app.add_middleware(TrustedHosts, settings=settings)
    return app
