"""``python -m helix_dbos.service``: what ``dbos start`` runs (see dbos-config.yaml).

Listens on ``--host``/``HELIX_DBOS_HOST`` (default 127.0.0.1; use 0.0.0.0 in a container) and
``--port``/``HELIX_DBOS_PORT`` or ``PORT`` (default 8000). Beyond loopback it refuses to start
without authentication unless ``--insecure`` (``HELIX_DBOS_INSECURE=1``) says a gateway does it.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from ..errors import HelixError, ValidationError
from ..settings import from_environ


def refuse(exc: HelixError) -> NoReturn:
    """A refused start: its sentence on stderr and exit 2 (``helix-dbos serve`` exits the same)."""
    print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
    raise SystemExit(2) from None


def serve(host: str, port: int, *, insecure: bool | None = None, app_spec: str | None = None) -> None:
    """Check the settings, build the app and run uvicorn; a refused start (a bad setting, an app that
    does not load, a model whose provider is missing, a port in use) exits 2 with its sentence."""
    from .app import create_app
    from .settings import ServiceSettings

    try:
        environment = from_environ()
        settings = ServiceSettings.from_env(host=host, insecure=insecure, environment=environment)
        app = create_app(app_spec=app_spec, settings=settings)
    except HelixError as exc:
        refuse(exc)
    if host in ("0.0.0.0", "::") and not environment.allowed_hosts:
        print(
            f"helix_dbos: listening on {host}, but only Host headers naming {', '.join(settings.allowed_hosts)} are answered; "
            "set HELIX_DBOS_ALLOWED_HOSTS to the names clients use (400 host_not_allowed otherwise)",
            file=sys.stderr,
        )
    # uvicorn at "warning" says nothing once it listens: one line, so a newcomer knows where to look
    banner = f"helix_dbos: serving on http://{host}:{port} (API at /docs, operator page at /ui); Ctrl-C stops it"
    from .http import serve

    serve(app, host, port, environment.http_log_level, banner=banner)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helix_dbos.service", description="The helix-dbos HTTP service.")
    parser.add_argument("--host", default=None, help="default: HELIX_DBOS_HOST, else 127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: HELIX_DBOS_PORT, else PORT, else 8000")
    parser.add_argument("--insecure", action="store_true", default=None, help="Serve beyond loopback without authentication (a gateway in front authenticates).")
    args = parser.parse_args(argv)  # a usage error exits 2 too (argparse's own)
    if args.port is not None and not 0 <= args.port <= 65535:
        refuse(ValidationError(f"--port must be an integer from 0 to 65535, not {args.port}"))
    try:
        environment = from_environ()
    except HelixError as exc:
        refuse(exc)
    serve(args.host or environment.host, args.port if args.port is not None else environment.port, insecure=args.insecure)


if __name__ == "__main__":
    main()
