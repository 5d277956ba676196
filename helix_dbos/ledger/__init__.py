"""Internal: the ledger: tables, engines, migrations and the queries over them (bottom layer).

``__all__`` names what the layers above import from the package; the public surface is ``helix_dbos``'s ``__all__``.
"""

from . import statuses, tables
from .engine import create_sync_engine, ensure_sqlite_wal, is_sqlite
from .migrate import upgrade

__all__ = ["create_sync_engine", "ensure_sqlite_wal", "is_sqlite", "statuses", "tables", "upgrade"]
