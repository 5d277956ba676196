"""Internal: the ledger: tables, engines, migrations and the queries over them (bottom layer).

``__all__`` names what the layers above import from the package; the public surface is ``helix_dbos``'s ``__all__``.
The names load on first use: ``definitions`` reads the ledger's words (``ledger.statuses``) and a
module of tool and agent definitions must not pay for SQLAlchemy (tests/processes/test_import_cost.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import statuses, tables
    from .engine import create_sync_engine, ensure_sqlite_wal, is_sqlite
    from .migrate import upgrade

__all__ = ["create_sync_engine", "ensure_sqlite_wal", "is_sqlite", "statuses", "tables", "upgrade"]

_FROM = {"create_sync_engine": "engine", "ensure_sqlite_wal": "engine", "is_sqlite": "engine", "upgrade": "migrate"}


def __getattr__(name: str) -> Any:
    if name in ("statuses", "tables"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM:
        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
