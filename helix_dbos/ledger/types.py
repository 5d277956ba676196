"""Column types for what models and tools write: any Python string in, the same string out.

They wrap the plain types (the DDL is unchanged, so no migration) and apply ``escape.py`` on bind
and on read, so every query module and every reader through the runtime sees the original
text, while the row holds only what Postgres and SQLite accept. Raw SQL sees the escaped form
(docs/audit.md).
"""

from __future__ import annotations

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
