"""A step's calls and a transaction's outputs go in as one cached statement, storing exactly what
single-row inserts store, on both databases.

On Postgres ``rows.insert_rows`` binds one array per column (``INSERT ... SELECT FROM unnest``):
SQLAlchemy never caches a multi-row ``VALUES`` insert, so that form was compiled again at every
step. The arrays must not change a stored byte: the lossless escape of ``LedgerJson`` and
``LedgerString`` is applied to each element, a JSON ``null`` stays a JSON ``null``, a missing
value stays SQL ``NULL``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine.default import CACHE_HIT

from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import runs as run_rows
from helix_dbos.ledger import sessions as session_rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger import tx_outputs
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.ledger.migrate import upgrade

ODD = "lone:\ud800 nul:\x00 quote:\" back:\\ brace:{ comma:,"


@pytest.fixture
def ledger(db_url: str) -> Iterator[sa.Engine]:
    if is_sqlite(db_url):
        upgrade(db_url)
    engine = create_sync_engine(db_url)
    with engine.begin() as conn:
        session_rows.insert_session(conn, "s1", "agent")
        run_rows.insert_run(conn, run_id="r1", session_id="s1", seq=1, agent_name="agent", entry="start", max_steps=5)
    yield engine
    engine.dispose()


def _calls(prefix: str) -> list[dict[str, Any]]:
    """Three calls whose values differ in every way a column can: NULLs, JSON null, odd text, both booleans."""
    base = {"session_id": "s1", "run_id": "r1", "checkpoint_id": f"{prefix}-cp", "step": 1, "kind": "tool", "status": "saved",
            "paired_by": None, "settled_run_id": None, "error": None}
    return [
        {**base, "dispatch_id": f"{prefix}0", "position": 0, "tool_call_id": ODD, "tool_name": ODD, "args": {"text": ODD, "n": [1, 2.5, None]},
         "replay": "safe", "concurrency_group": None, "sequential": False, "requires_approval": True, "transactional": False, "result": None},
        {**base, "dispatch_id": f"{prefix}1", "position": 1, "tool_call_id": None, "tool_name": "plain", "args": None,
         "replay": "unsafe", "concurrency_group": "g", "sequential": True, "requires_approval": False, "transactional": True,
         "result": {"ok": ODD}},
        {**base, "dispatch_id": f"{prefix}2", "position": 2, "tool_call_id": "c2", "tool_name": "x", "args": [],
         "replay": "safe", "concurrency_group": None, "sequential": False, "requires_approval": False, "transactional": False,
         "result": "text", "status": "completed", "settled_run_id": "r1", "paired_by": "body"},
    ]


def _raw(conn: sa.Connection, table: str, where: str, order: str) -> list[tuple[Any, ...]]:
    """Every column as the database holds it (no type's read processing), in a stable text form."""
    columns = [c.name for c in t.metadata.tables[f"helix.{table}"].columns]
    name = table if is_sqlite(str(conn.engine.url)) else f"helix.{table}"
    text = ", ".join(f"CAST({c} AS TEXT)" for c in columns)
    return [tuple(r) for r in conn.execute(sa.text(f"SELECT {text} FROM {name} WHERE {where} ORDER BY {order}")).all()]


def _statements(engine: sa.Engine) -> tuple[list[Any], Any]:
    seen: list[Any] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        seen.append(context)

    sa.event.listen(engine, "before_cursor_execute", record)
    return seen, lambda: sa.event.remove(engine, "before_cursor_execute", record)


def test_a_steps_calls_store_what_one_row_at_a_time_stores(ledger: sa.Engine) -> None:
    with ledger.begin() as conn:
        call_rows.insert_calls(conn, _calls("bulk"))
        ts = conn.execute(sa.select(t.calls.c.created_at).where(t.calls.c.dispatch_id == "bulk0")).scalar_one()
        for row in _calls("one"):
            conn.execute(t.calls.insert(), [{"created_at": ts, **row}])
    with ledger.connect() as conn:
        bulk = _raw(conn, "calls", "dispatch_id LIKE 'bulk%'", "position")
        one = _raw(conn, "calls", "dispatch_id LIKE 'one%'", "position")
        read = call_rows.calls_of_checkpoint(conn, "bulk-cp")
    assert len(bulk) == 3
    names = [c.name for c in t.calls.columns]
    differing = {"dispatch_id", "checkpoint_id"}
    for b, o in zip(bulk, one, strict=True):
        assert {n: v for n, v in zip(names, b, strict=True) if n not in differing} == {n: v for n, v in zip(names, o, strict=True) if n not in differing}
    # and read back through the runtime's types, the original values
    assert [r["tool_call_id"] for r in read] == [ODD, None, "c2"]
    assert read[0]["args"] == {"text": ODD, "n": [1, 2.5, None]} and read[1]["args"] is None and read[2]["args"] == []
    assert [r["result"] for r in read] == [None, {"ok": ODD}, "text"]
    assert [r["requires_approval"] for r in read] == [True, False, False]


def test_a_steps_calls_are_one_statement_compiled_once(ledger: sa.Engine, db_url: str) -> None:
    seen, stop = _statements(ledger)
    try:
        for prefix in ("a", "b"):
            with ledger.begin() as conn:
                seen.clear()
                call_rows.insert_calls(conn, _calls(prefix))
    finally:
        stop()
    if is_sqlite(db_url):
        assert len(seen) == 1 and seen[0].executemany  # one executemany
        return
    assert len(seen) == 1 and not seen[0].executemany
    assert seen[0].cache_hit is CACHE_HIT  # the second step's insert reused the first's compiled statement


def test_a_transactions_outputs_keep_their_values_and_order(ledger: sa.Engine, db_url: str) -> None:
    outputs = [("op-a", {"x": ODD}), ("op-b", None), ("op-c", [1, "two"]), ("op-d", ODD)]
    seen, stop = _statements(ledger)
    try:
        for wf in ("wf1", "wf2"):
            with ledger.begin() as conn:
                seen.clear()
                tx_outputs.record(conn, wf, *outputs)
    finally:
        stop()
    assert len(seen) == 1
    if not is_sqlite(db_url):
        assert seen[0].cache_hit is CACHE_HIT
    with ledger.connect() as conn:
        for op, output in outputs:
            row = tx_outputs.recorded(conn, "wf2", op)
            assert row is not None and row[0] == output
        ordered = conn.execute(sa.select(t.tx_outputs.c.op).where(t.tx_outputs.c.workflow_id == "wf2").order_by(t.tx_outputs.c.created_at)).scalars().all()
        raw_null = conn.execute(sa.text(
            f"SELECT CAST(output AS TEXT) FROM {'tx_outputs' if is_sqlite(db_url) else 'helix.tx_outputs'} WHERE workflow_id = 'wf2' AND op = 'op-b'"
        )).scalar_one()
    assert ordered == ["op-a", "op-b", "op-c", "op-d"]
    assert raw_null == "null"  # a JSON null, as the single-row insert stores it


def test_rows_that_name_different_columns_are_refused_and_write_nothing(ledger: sa.Engine, db_url: str) -> None:
    short = _calls("odd")
    del short[2]["paired_by"]  # the third row leaves out a column the others name
    extra = _calls("odd")
    extra[2]["outcome_note"] = "only here"  # the third row names a column the others do not
    for rows in (short, extra):
        with pytest.raises(ValueError, match="same columns"), ledger.begin() as conn:
            call_rows.insert_calls(conn, rows)
    with ledger.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.calls).where(t.calls.c.checkpoint_id == "odd-cp")).scalar_one() == 0
