"""Internal: the statement kinds a transactional tool may opt into (``@hx.tool(transactional=True, sql_allows=...)``).

Without an opt-in a body runs queries and plain DML on its own tables only (``ledger/body_guard.py``).
These are the only other kinds a tool can name: DDL on its own tables. Nothing else can be opted into
(transaction control, ``SET``/``RESET``, ``PRAGMA``, ``ATTACH``, ``DO``, ``CALL``, ``COPY``, ``GRANT``, schema,
database, role, function or trigger DDL): each would reach past the call's transaction or its tables.
No imports, and outside ``ledger`` (whose package loads SQLAlchemy): ``definitions`` checks a tool's names
against this without loading a database driver, and ``ledger/body_guard.py`` enforces them.
"""

from __future__ import annotations

from typing import Final

SQL_OPT_INS: Final = frozenset({
    "CREATE TABLE", "CREATE INDEX", "CREATE VIEW", "ALTER TABLE", "DROP TABLE", "DROP INDEX", "DROP VIEW", "TRUNCATE", "LOCK",
})


def normalized(kind: str) -> str:
    """``create  table`` -> ``CREATE TABLE``."""
    return " ".join(kind.split()).upper()
