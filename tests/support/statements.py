"""The statements a runtime's ledger engine runs, grouped by the transaction they committed in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa


@contextmanager
def per_transaction(engine: sa.Engine, on_statement: Any = None) -> Iterator[list[list[str]]]:
    """While the block runs: each committed transaction's statements, in order, appended to the
    list yielded (a transaction still open at the end is left out). ``on_statement``, if given, is
    called with each statement's ``before_cursor_execute`` arguments as well."""
    open_tx: dict[int, list[str]] = defaultdict(list)
    done: list[list[str]] = []

    def seen(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        open_tx[id(conn.connection.dbapi_connection)].append(statement)
        if on_statement is not None:
            on_statement(conn, cursor, statement, parameters, context, executemany)

    def ended(conn: sa.Connection) -> None:
        done.append(open_tx.pop(id(conn.connection.dbapi_connection), []))

    sa.event.listen(engine, "before_cursor_execute", seen)
    sa.event.listen(engine, "commit", ended)
    try:
        yield done
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
        sa.event.remove(engine, "commit", ended)
