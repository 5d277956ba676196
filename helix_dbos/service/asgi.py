"""``uvicorn helix_dbos.service.asgi:app``: the service as a module-level ASGI app for any server."""

from __future__ import annotations

from .app import create_app

app = create_app()
