"""Internal: finding the user's runtime: ``HELIX_DBOS_APP=package.module:attr`` names a ``hx.Runtime`` or a factory.

The service and the CLI resolve the app the same way, so ``helix-dbos resume`` acts with exactly the
agents the service serves. Unset, the bundled example agents are served.

A module in the working directory is found whichever way the process started: ``dbos start`` runs
``python -m helix_dbos.service``, which puts the working directory on ``sys.path``, but the
``helix-dbos`` console script does not, so ``helix-dbos serve --app myapp.agents:runtime`` beside the
``myapp/`` that ``dbos start`` served answered "No module named 'myapp'". A module that is not
importable otherwise is looked for in the working directory too (last, so nothing installed is
shadowed).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .errors import ConfigurationError
from .runtime import Runtime
from .settings import DEFAULT_APP, from_environ

ENV = "HELIX_DBOS_APP"
__all__ = ["DEFAULT_APP", "ENV", "app_spec", "load_runtime"]


def app_spec(explicit: str | None = None) -> str:
    return explicit or from_environ().app


def _import_app(module_name: str) -> Any:
    """The app's module; one missing from ``sys.path`` is looked for in the working directory."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        here = os.getcwd()
        if exc.name != top or any(os.path.abspath(p or ".") == here for p in sys.path):
            raise
    sys.path.append(here)
    return importlib.import_module(module_name)


def load_runtime(spec: str | None = None, *, database_url: str | None = None) -> Runtime:
    """Import the app and return its (not yet launched) runtime.

    ``database_url`` overrides the runtime's own choice (the CLI's ``--db``); without it the runtime
    resolves its URL as always (argument, ``HELIX_DBOS_DATABASE_URL``, dbos-config.yaml, SQLite).
    """
    spec = app_spec(spec)
    module_name, _, attr = spec.partition(":")
    attr = attr or "runtime"
    try:
        module = _import_app(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import the app module {module_name!r} ({ENV}={spec!r}) from the installed packages or the working directory {os.getcwd()}",
            detail=str(exc),
        ) from exc
    try:
        target: Any = getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r} ({ENV}={spec!r})") from None
    runtime = target if isinstance(target, Runtime) else (target() if callable(target) else None)
    if not isinstance(runtime, Runtime):
        raise ConfigurationError(f"{spec!r} is neither a helix_dbos Runtime nor a factory returning one")
    if database_url:
        runtime.database_url = database_url  # the operator's --db wins over the app's choice
    return runtime
