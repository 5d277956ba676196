"""Column types for what models and tools write: any Python string in, the same string out.

They wrap the plain types (the DDL is unchanged, so no migration) and apply ``escape.py`` on bind
and on read, so every query module and every reader through the runtime sees the original
text, while the row holds only what Postgres and SQLite accept. Raw SQL sees the escaped form
(docs/audit.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .escape import escape_json, escape_text, unescape_json, unescape_text


class LedgerJson(sa.types.TypeDecorator[Any]):
    """JSON readable in SQL on both databases (``jsonb`` on Postgres, JSON text on SQLite), escaped."""

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(sa.JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else escape_json(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else unescape_json(value)


class LedgerText(sa.types.TypeDecorator[str]):
    """``text`` that holds any string (model text, tool error messages), escaped."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else escape_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else unescape_text(value)


class LedgerString(sa.types.TypeDecorator[str]):
    """``varchar(n)`` for names a model chooses (tool names, tool call ids), escaped."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else escape_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else unescape_text(value)


class UtcTimestamp(sa.types.TypeDecorator[datetime]):
    """``timestamptz`` read back as an aware UTC datetime on both databases.

    Every time the ledger writes is UTC (``rows.now``); Postgres returns it with the session's
    offset, SQLite (which has no time zone type) as a naive datetime. Read through this type both
    are UTC with their offset, so every timestamp a view, the CLI's JSON or the API shows is an
    RFC 3339 ``date-time`` (``...+00:00``), never a local time without one.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC)  # SQLite keeps the wall clock only: make it UTC's

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def as_utc(value: Any) -> datetime | None:
    """A timestamp read through raw SQL (a view's column: SQLite gives its text) as aware UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
