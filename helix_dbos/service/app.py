"""The FastAPI app: one runtime per process, launched in the lifespan and shut down with it.

Launching in the lifespan (not at import) means ``uvicorn --reload``, OpenAPI generation and tests
can build the app without touching a database, and a relaunched process recovers its executor's
pending runs before it accepts a request.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI

import helix_dbos

from ..runtime import Runtime
from . import errors, live, routes
from .loader import load_runtime

DESCRIPTION = (
    "LLM agents as DBOS workflows over the Helix ledger. Start sessions, answer approvals and "
    "client tools, resume, retry and stop runs, and follow each session's events over SSE. "
    "Errors are `{error, code, detail}` with 400 (bad input), 404 (unknown) or 409 (running / stale)."
)


def create_app(runtime: Runtime | None = None, *, app_spec: str | None = None) -> FastAPI:
    """The service over ``runtime``, or over the app ``HELIX_DBOS_APP`` (``app_spec``) names."""
    target = runtime if runtime is not None else load_runtime(app_spec)

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

    app = FastAPI(title="helix-dbos", version=helix_dbos.__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.runtime = target
    errors.install(app)
    app.include_router(routes.router)
    app.include_router(live.router)
    return app
