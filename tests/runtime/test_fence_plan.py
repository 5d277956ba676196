"""The gate's and the step commit's calls read (``fence_reads.calls_beside_fence``) reads the step's
calls beside the fence, and on Postgres the server's plan cache keeps one generic plan for it.

Why the plan matters: the read runs at every attempt gate and step commit (~20 times a run). Its
step's calls used to be compared with the statement's parameters; whenever the calls' statistics
predated the run (a ledger growing faster than autoanalyze, as under any burst), a new run id was
no value the statistics held, so a custom plan (~1 row) always looked cheaper than the generic one
(rows / distinct run ids) and Postgres planned the statement again at every execution. Joined on
the saver and step the locked CTE carries, every plan costs the same and the generic one is kept.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ToolCallPart

import helix_dbos as hx
from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import fence_reads
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import PREPARED_MAX, create_sync_engine, is_sqlite
from helix_dbos.runtime.floor import fence
from tests.runtime.test_core_run import scripted

#: Runs whose calls the statistics hold (every one of their run ids a most-common value), the calls
#: each saved, and the runs saved since: the generic plan estimates a step's calls as rows / distinct
#: run ids, a custom plan ~1 row for a run id the statistics do not hold.
OLD_RUNS, CALLS_EACH, NEWER_RUNS = 30, 15, 150
EXECUTIONS = 12


def _run_with_calls(make_runtime: Any, db_url: str) -> dict[str, Any]:
    def note(ctx: hx.ToolContext, text: str) -> str:
        """Note something."""
        return text

    model, _ = scripted([ToolCallPart("note", {"text": "a"}, "c1"), ToolCallPart("note", {"text": "b"}, "c2")], "done")
    rt = make_runtime([hx.Agent("noter", model, tools=[hx.tool(replay="safe")(note)])])
    assert rt.start("noter", "note a and b").result(timeout=120).status == "completed"
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            c = t.calls.c
            return dict(conn.execute(sa.select(c.session_id, c.run_id, c.step).limit(1)).mappings().one())
    finally:
        engine.dispose()


def test_the_calls_beside_the_fence_are_the_steps_calls(make_runtime: Any, db_url: str) -> None:
    ids = _run_with_calls(make_runtime, db_url)
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            plain = call_rows.of_step(conn, ids["run_id"], ids["step"])
            beside = fence_reads.calls_beside_fence(conn, ids["run_id"], ids["run_id"], ids["step"], fence.STATUS_OF)
            assert [r["dispatch_id"] for r in beside] == [r["dispatch_id"] for r in plain] and len(plain) == 2
            for row in beside:
                assert row["fence_status"] == "completed" and row["fence_agent"] == "noter"
                assert {k: row[k] for k in plain[0]} == next(dict(p) for p in plain if p["dispatch_id"] == row["dispatch_id"])
            assert fence_reads.calls_beside_fence(conn, ids["run_id"], ids["run_id"], ids["step"] + 7, fence.STATUS_OF) == []
            # a run that is not there: no row on Postgres (the CTE finds none), the calls with no fence on SQLite
            unknown = fence_reads.calls_beside_fence(conn, "no-such-run", ids["run_id"], ids["step"], fence.STATUS_OF)
            assert all(r["fence_status"] is None for r in unknown) and (is_sqlite(db_url) or unknown == [])
    finally:
        engine.dispose()


@pytest.mark.parametrize("for_update", [False, True])
def test_the_calls_read_keeps_a_generic_plan_when_the_statistics_predate_the_run(make_runtime: Any, db_url: str, for_update: bool) -> None:
    if is_sqlite(db_url):
        pytest.skip("SQLite has no plan cache: the statement is compiled once per connection by the driver")
    ids = _run_with_calls(make_runtime, db_url)
    # every statement prepared at its first execution, so the server's plan cache judges each one
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool, connect_args={"prepare_threshold": 0})
    try:
        now = datetime.now(UTC)

        def calls_of(runs: range) -> list[dict[str, Any]]:
            return [
                {"dispatch_id": uuid.uuid4().hex, "session_id": ids["session_id"], "run_id": f"old-{r}", "checkpoint_id": f"old-{r}",
                 "step": 0, "position": p, "tool_name": "note", "kind": "tool", "replay": "safe", "status": "completed", "created_at": now}
                for r in runs for p in range(CALLS_EACH)
            ]

        with engine.connect() as conn:  # this test's own database: no autoanalyze refreshes the statistics mid-test
            conn.execute(sa.text("ALTER TABLE helix.calls SET (autovacuum_enabled = false)"))
            conn.execute(t.calls.insert(), calls_of(range(OLD_RUNS)))
            conn.commit()
            conn.execute(sa.text("ANALYZE helix.calls"))
            conn.commit()
            conn.execute(t.calls.insert(), calls_of(range(OLD_RUNS, OLD_RUNS + NEWER_RUNS)))
            conn.commit()
        fresh = uuid.uuid4().hex  # a run the statistics do not hold: the next run of a growing ledger
        with engine.begin() as conn:
            conn.execute(t.calls.insert(), [
                {"dispatch_id": uuid.uuid4().hex, "session_id": ids["session_id"], "run_id": fresh, "checkpoint_id": fresh,
                 "step": 0, "position": p, "tool_name": "note", "kind": "tool", "replay": "safe", "status": "saved", "created_at": now}
                for p in range(3)
            ])
        with engine.connect() as conn:
            for _ in range(EXECUTIONS):
                got = fence_reads.calls_beside_fence(conn, ids["run_id"], fresh, 0, fence.STATUS_OF, for_update=for_update)
                assert len(got) == 3
            prepared = conn.execute(sa.text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")).mappings().all()
            plans = next(p for p in prepared if "fenced" in p["statement"] and "helix.calls.dispatch_id" in p["statement"])
    finally:
        engine.dispose()
    # Postgres plans the first 5 executions custom, then keeps the generic plan unless it costs more
    counts = f"custom plans {plans['custom_plans']}, generic {plans['generic_plans']} over {EXECUTIONS} executions"
    assert plans["custom_plans"] <= 5, f"planned again at each execution: {counts}"
    assert plans["generic_plans"] >= EXECUTIONS - 5, counts


def test_the_runtimes_pools_plan_each_statement_once(make_runtime: Any, db_url: str) -> None:
    """The runtime's own pools (API and transactions) prepare each statement at its first execution
    and keep one generic plan per prepared statement (``create_sync_engine(generic_plans=True)``):
    a statement is parsed and planned once per connection, never again for its values, whatever the
    cost model would guess. psycopg's default runs a statement four times unprepared (each parsed
    and planned) before it prepares it, and Postgres then plans the first five executions of a
    prepared statement custom, and more whenever a custom plan looks cheaper (the test above: the
    step's fenced reads at 2 of 5 executions under load)."""
    if is_sqlite(db_url):
        pytest.skip("SQLite has no plan cache: the statement is compiled once per connection by the driver")
    made: list[hx.Runtime] = []

    def kept(agents: list[hx.Agent]) -> hx.Runtime:
        made.append(make_runtime(agents))
        return made[-1]

    ids = _run_with_calls(kept, db_url)
    rt = made[0]
    engines = {"api": rt.engine, "tx": rt._launched.runner.registry.env.tx_engine}
    for name, engine in engines.items():
        with engine.connect() as conn:
            assert conn.execute(sa.text("SHOW plan_cache_mode")).scalar() == "force_generic_plan", name
            driver = conn.connection.driver_connection
            assert driver is not None and driver.prepare_threshold == 0 and driver.prepared_max == PREPARED_MAX, name
            once = f"SELECT CAST(:n AS integer) + 1 AS first_use_{uuid.uuid4().hex}"
            assert conn.execute(sa.text(once), {"n": 1}).scalar() == 2
            statements = conn.execute(sa.text("SELECT statement FROM pg_prepared_statements")).scalars().all()
            assert any("first_use_" in s and once.rsplit("_", 1)[1] in s for s in statements), f"{name}: not prepared at its first execution"
    with engines["tx"].connect() as conn:
        for _ in range(EXECUTIONS):
            assert len(fence_reads.calls_beside_fence(conn, ids["run_id"], ids["run_id"], ids["step"], fence.STATUS_OF)) == 2
        prepared = conn.execute(sa.text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")).mappings().all()
    plans = next(p for p in prepared if "fenced" in p["statement"] and "helix.calls.dispatch_id" in p["statement"])
    # every execution on this connection ran the one generic plan (the run may have used it before these)
    assert plans["custom_plans"] == 0 and plans["generic_plans"] >= EXECUTIONS, dict(plans)
