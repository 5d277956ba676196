"""The ledger: tables, engines, migrations and the queries over them (bottom layer)."""

from . import statuses, tables
from .engine import create_sync_engine, ensure_sqlite_wal, is_sqlite
from .migrate import upgrade

__all__ = ["create_sync_engine", "ensure_sqlite_wal", "is_sqlite", "statuses", "tables", "upgrade"]
