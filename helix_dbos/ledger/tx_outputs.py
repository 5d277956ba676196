"""The ``tx_outputs`` table: each exactly-once ledger transaction's output, keyed by (workflow, operation).

How ``runtime/floor/durable.tx`` uses it (replay, a concurrent execution losing on the key) is told
there; the statements are built once, as this runs in nearly every run transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from . import tables as t
from .rows import insert_rows, now

_RECORDED = sa.select(t.tx_outputs.c.output).where(t.tx_outputs.c.workflow_id == sa.bindparam("w_workflow_id"), t.tx_outputs.c.op == sa.bindparam("w_op"))


def recorded(conn: sa.Connection, workflow_id: str | None, op: str) -> sa.Row[Any] | None:
    """The operation's recorded output as a one-column row (None: not recorded; a row of None: it returned None)."""
    return conn.execute(_RECORDED, {"w_workflow_id": workflow_id, "w_op": op}).first()


def record(conn: sa.Connection, workflow_id: str, *outputs: tuple[str, Any]) -> None:
    """Record each (operation, output) in one statement; a second execution of the same operation
    fails here on the primary key. Each record's ``created_at`` is a microsecond after the one
    before it, so the records of one statement keep the order they were written in (an operator
    reads a workflow's records by ``created_at``)."""
    ts = now()
    rows = [{"workflow_id": workflow_id, "op": op, "output": output, "created_at": ts + timedelta(microseconds=i)}
            for i, (op, output) in enumerate(outputs)]
    insert_rows(conn, t.tx_outputs, rows)


def exists(conn: sa.Connection, workflow_id: str, op: str) -> bool:
    o = t.tx_outputs.c
    return conn.execute(sa.select(o.op).where(o.workflow_id == workflow_id, o.op == op)).first() is not None
