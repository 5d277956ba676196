"""Running the app under uvicorn so that Ctrl-C ends open event streams instead of cutting them.

uvicorn's graceful shutdown waits for every open connection, then cancels what is left after
``timeout_graceful_shutdown``: an SSE stream never ends by itself, so each Ctrl-C or SIGTERM of a
service with a browser or client following a session waited the whole 5 s and then printed
uvicorn's "Exception in ASGI application" traceback for the cancelled stream. The server here marks
the app as stopping (``app.state.stopping``) the moment the signal arrives; each stream sees it at
its next poll and ends cleanly, and its client reconnects with ``Last-Event-ID`` once the service is
back (the stream's ``retry:`` tells it when to try).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from types import FrameType
from typing import Any

import uvicorn

#: The exit status when the server never started (a port in use, a runtime that would not launch
#: in the lifespan): 2, a refused start, as every other refusal of ``serve`` and of
#: ``python -m helix_dbos.service`` (uvicorn.run's own 3 said the same thing with another number).
STARTUP_FAILURE = 2


def is_stopping(app: Any) -> bool:
    return bool(getattr(app.state, "stopping", False))


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Any, banner: str | None = None) -> None:
        super().__init__(config)
        self._app = app
        self._banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._banner:  # once it listens: a refused start never said it serves
            sys.stderr.write(self._banner + "\n")
            sys.stderr.flush()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.stopping = True  # open streams end at their next poll
        super().handle_exit(sig, frame)


class _RefusalShown(logging.Filter):
    """Drops the lifespan's traceback when the failure was a typed refusal: it is printed as one line."""

    def __init__(self, app: Any) -> None:
        super().__init__()
        self._app = app

    def filter(self, record: logging.LogRecord) -> bool:
        refused = getattr(self._app.state, "start_refused", None) is not None
        return not (refused and str(record.msg).startswith("Traceback"))


def _print_refusal(app: Any) -> None:
    refused = getattr(app.state, "start_refused", None)
    if refused is None:
        return
    sys.stderr.write(f"error [{refused.code}]: {refused.message}\n")
    if refused.detail:
        sys.stderr.write(f"{refused.detail}\n")


def serve(app: Any, host: str, port: int, log_level: str = "warning", banner: str | None = None) -> None:
    """``uvicorn.run(app, ...)`` with the service's settings, and streams that end on a stop signal.
    ``log_level``: uvicorn's (``HELIX_DBOS_HTTP_LOG_LEVEL``, read by ``helix_dbos/settings.py``);
    ``banner``: the line printed on stderr once the server listens (uvicorn at "warning" says nothing)."""
    app.state.stopping = False
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
    server = _Server(config, app, banner)
    app.state.start_refused = None
    quiet = _RefusalShown(app)
    logging.getLogger("uvicorn.error").addFilter(quiet)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # the Ctrl-C uvicorn re-raises once it has shut down (uvicorn.run's own)
            server.run()
    except SystemExit:
        if server.started:
            raise
        # uvicorn exits 3 itself where it never started: a port in use, a lifespan (the runtime's
        # launch) that failed; the number is ours
        _print_refusal(app)
        sys.exit(STARTUP_FAILURE)
    finally:
        logging.getLogger("uvicorn.error").removeFilter(quiet)
    if not server.started:
        _print_refusal(app)
        sys.exit(STARTUP_FAILURE)
