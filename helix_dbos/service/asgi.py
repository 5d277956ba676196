"""``uvicorn helix_dbos.service.asgi:app``: the service as a module-level ASGI app for any server.

The app cannot see the address the server binds, so set ``HELIX_DBOS_HOST`` to it: the refusal to
serve beyond loopback without authentication, and the default allowed hosts, are read from there.
"""

from __future__ import annotations

from .app import create_app

app = create_app()
