"""``python -m helix_dbos.service``: what ``dbos start`` runs (see dbos-config.yaml).

Listens on ``--host``/``HELIX_DBOS_HOST`` (default 127.0.0.1; use 0.0.0.0 in a container) and
``--port``/``HELIX_DBOS_PORT`` or ``PORT`` (default 8000). Beyond loopback it refuses to start
without authentication unless ``--insecure`` (``HELIX_DBOS_INSECURE=1``) says a gateway does it.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import ConfigurationError


def serve(host: str, port: int, *, insecure: bool | None = None, app_spec: str | None = None) -> None:
    """Check the settings, build the app and run uvicorn; a bad setting exits 2 with its sentence."""
    from .app import create_app
    from .settings import ServiceSettings

    try:
        settings = ServiceSettings.from_env(host=host, insecure=insecure)
        app = create_app(app_spec=app_spec, settings=settings)
    except ConfigurationError as exc:
        print(f"error [configuration_error]: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    if host in ("0.0.0.0", "::") and not os.environ.get("HELIX_DBOS_ALLOWED_HOSTS"):
        print(
            f"helix_dbos: listening on {host}, but only Host headers naming {', '.join(settings.allowed_hosts)} are answered; "
            "set HELIX_DBOS_ALLOWED_HOSTS to the names clients use (400 host_not_allowed otherwise)",
            file=sys.stderr,
        )
    # uvicorn at "warning" says nothing once it listens: one line, so a newcomer knows where to look
    print(f"helix_dbos: serving on http://{host}:{port} (API at /docs, operator page at /ui); Ctrl-C stops it", file=sys.stderr)
    from .http import serve

    serve(app, host, port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helix_dbos.service", description="The helix-dbos HTTP service.")
    parser.add_argument("--host", default=os.environ.get("HELIX_DBOS_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("HELIX_DBOS_PORT") or os.environ.get("PORT") or 8000))
    parser.add_argument("--insecure", action="store_true", default=None, help="Serve beyond loopback without authentication (a gateway in front authenticates).")
    args = parser.parse_args(argv)
    serve(args.host, args.port, insecure=args.insecure)


if __name__ == "__main__":
    main()
