"""``helix-dbos serve`` and ``helix-dbos worker``: the two commands that keep a process in the
foreground (the HTTP service, a queue worker) rather than answer and exit; so, but them, no
command takes signals, binds a port or runs until stopped.

Registered on ``main.py``'s app by ``register`` (this module never imports ``main``, so there is no
circle), after the other commands: ``--help`` lists them last, as it always has.
"""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from .common import DbOption, database_url, int_range, refused_starts


@refused_starts
def serve(
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default: HELIX_DBOS_HOST, then 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", callback=int_range("--port", 0, 65535), help="Port to bind (default: HELIX_DBOS_PORT, then PORT, then 8000).")] = None,
    app_spec: Annotated[str | None, typer.Option("--app", help="package.module:runtime (default: HELIX_DBOS_APP, then the examples).")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Serve beyond loopback without authentication (a gateway in front authenticates).")] = False,
    front_end: Annotated[bool, typer.Option("--front-end", help="Only admit and enqueue: run nothing here; `helix-dbos worker` processes run the runs (docs/scaling.md).")] = False,
    db: DbOption = None,
) -> None:
    """Run the HTTP service in the foreground (what `dbos start` runs). Takes --db, but no --json.

    Beyond loopback it refuses to start without HELIX_DBOS_API_KEYS or HELIX_DBOS_AUTHENTICATE,
    unless --insecure (docs/service.md, "Deploying"). With --front-end the process never launches
    DBOS: it runs no body, no model request and no recovered run (HELIX_DBOS_MODE=client).
    """
    import importlib

    from ..settings import from_environ

    environment = from_environ()  # a bad HELIX_DBOS_* value is refused here, typed, before anything starts
    host = host or environment.host
    port = port if port is not None else environment.port

    # The one command that runs the service hands over to it by name: nothing else in the CLI
    # depends on the service (its reads and JSON go through the runtime's reader and wire.py).
    create_app = importlib.import_module("helix_dbos.service.app").create_app

    # Handed over as arguments, read from this one environment: the bound address the service
    # allows as a Host, and the front end's mode (unless the app's runtime names a mode itself).
    settings = importlib.import_module("helix_dbos.service.settings").ServiceSettings.from_env(
        host=host, insecure=True if insecure else None, environment=environment)
    app_ = create_app(app_spec=app_spec, settings=settings, database_url=database_url(db) if db else None, front_end=front_end)
    # uvicorn at "warning" says nothing once it listens: one line (once it does), so a newcomer knows where to look
    banner = f"helix-dbos: serving on http://{host}:{port} (API at /docs, operator page at /ui); Ctrl-C stops it"
    importlib.import_module("helix_dbos.service.http").serve(app_, host, port, environment.http_log_level, banner=banner)


@refused_starts
def worker(
    app_spec: Annotated[str | None, typer.Option("--app", help="package.module:runtime (default: HELIX_DBOS_APP, then the examples).")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Runs one worker runs at once (DBOS worker_concurrency of the run queues).")] = None,
    drain_timeout: Annotated[float, typer.Option("--drain-timeout", min=0, help="Seconds SIGTERM lets runs in flight finish before they are left to takeover.")] = 30.0,
    db: DbOption = None,
) -> None:
    """Serve the run queues in the foreground: run what front ends enqueue (docs/scaling.md).

    Prints one JSON line once serving (its executor id, pid and Postgres connections by pool:
    docs/operations.md, "Database connections"). SIGTERM (or Ctrl-C) drains: no more dequeues, runs in
    flight get --drain-timeout seconds to finish, the rest stay pending for another worker's
    takeover; a second signal ends that wait at once. Exit 0 once drained.
    """
    import signal
    import threading

    from ..loader import load_runtime

    runtime = load_runtime(app_spec, database_url=database_url(db) if db else None)
    runtime.mode = "worker"
    if concurrency is not None:
        runtime.worker_concurrency = concurrency
    stop, hurry = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # the first drains; a second cuts the drain short
        signal.signal(sig, lambda *_: (hurry if stop.is_set() else stop).set())
    runtime.launch()
    typer.echo(json.dumps({"worker": runtime.executor_id, "pid": os.getpid(), "connections": runtime.connection_footprint()}))
    while not stop.wait(0.5):  # woken by the signal handler above; the timeout is only a heartbeat
        continue
    left = runtime.drain(drain_timeout, hurry=hurry)
    typer.echo(json.dumps({"drained": runtime.executor_id if runtime.settings else None, "left_pending": left}))


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``worker`` to ``app`` (after its other commands, for ``--help``'s order)."""
    app.command()(serve)
    app.command()(worker)
