"""``python -m helix_dbos.service``: what ``dbos start`` runs (see dbos-config.yaml).

Listens on ``HELIX_DBOS_HOST`` (default 127.0.0.1; use 0.0.0.0 in a container) and
``HELIX_DBOS_PORT`` or ``PORT`` (default 8000).
"""

from __future__ import annotations

import os

import uvicorn

from .app import create_app


def main() -> None:
    host = os.environ.get("HELIX_DBOS_HOST", "127.0.0.1")
    port = int(os.environ.get("HELIX_DBOS_PORT") or os.environ.get("PORT") or 8000)
    uvicorn.run(create_app(), host=host, port=port, log_level=os.environ.get("HELIX_DBOS_HTTP_LOG_LEVEL", "warning"), timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
