"""Before/after measurements of proposed fixes to helix_dbos' hot spots, without editing helix_dbos.

    python -m bench.prototypes --db both -n 15

Each fix is applied by monkeypatching this process only, behind a flag the runner sets per run, so
"as is" and every fixed variant are measured interleaved, in one process, on one DBOS launch, like
the main bench. These are prototypes of the diffs proposed in docs/benchmarks.md ("Hot spots"):
they show what each change buys; the real change belongs in helix_dbos and its tests.

Two fixes found this way landed in helix_dbos while this bench was written: the gate returning
the run's agent name instead of a separate transaction per body (eced69b), and the ledger's
transactions running whole on a blocking engine in worker threads instead of statement by
statement on DBOS's event loop through SQLAlchemy's asyncio adaptation (9b74aaf; prototyped here
as `sync_ledger`: 0.70x per run on SQLite, 0.91x on Postgres, and 20 concurrent SQLite sessions
stopped failing with `database is locked`). What is left to try:

* `no_preping` (runtime.py, ledger/engine.py): no `pool_pre_ping` on the ledger engines, whose
  pools are private to the process; each checkout otherwise costs a `SELECT 1` round trip.
* `plain_boundaries` (workflow.py): the append checkpoint and the step commit as plain DBOS steps
  around an idempotent transaction (an existing checkpoint row for (run, step, kind), which the
  unique constraint `uq_checkpoints_run_step_kind` guarantees is written once, returns the saved
  outcome) instead of a datasource exactly-once transaction (a pre-read of `datasource_outputs`,
  its insert, and a `_still_owns` read of `workflow_status`): 2 tx per boundary, 4 per step.
* `fewer_statements` (ledger/store.py): `emit` as ONE statement on Postgres (the session's
  `event_seq` bump as a data-modifying CTE feeding the event insert, same row lock, same order)
  instead of UPDATE ... RETURNING then INSERT; `record_result` takes the call's session and tool
  name from `UPDATE ... RETURNING` instead of re-reading the call.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from bench.workload import WorkloadSpec


@dataclass
class Flags:
    no_preping: bool = False
    plain_boundaries: bool = False
    fewer_statements: bool = False


FLAGS = Flags()
_installed = False


def install() -> None:
    """Patch the switch points once per process (each checks FLAGS at call time)."""
    global _installed
    if _installed:
        return
    _installed = True
    from dbos import DBOS

    from helix_dbos.ledger import store
    from helix_dbos.ledger import tables as t
    from helix_dbos.runtime import commits, durable, workflow

    def append_once(conn: sa.Connection, run_id: str, sid: str, step: int, reply: dict[str, Any], planned: list[Any]) -> dict[str, Any]:
        cp = conn.execute(
            sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.run_id == run_id, t.checkpoints.c.step == step, t.checkpoints.c.kind == "append")
        ).scalar()
        if cp is not None:  # a replay after the commit: the saved calls, as the first execution returned them
            return {"run_id": run_id, "step": step, "checkpoint_id": cp, "calls": [step_commits.brief(c) for c in store.calls_of_checkpoint(conn, cp)]}
        return step_commits.append_checkpoint(conn, run_id, sid, step, reply, planned)

    def committed_outcome(conn: sa.Connection, run_id: str, step: int) -> dict[str, Any] | None:
        kind = conn.execute(
            sa.select(t.checkpoints.c.kind).where(t.checkpoints.c.run_id == run_id, t.checkpoints.c.step == step, t.checkpoints.c.kind.in_(("step", "suspension")))
        ).scalar()
        if kind is None:
            return None
        run = store.get_run(conn, run_id)
        assert run is not None
        if run["status"] == "running":
            return {"status": "committed"}
        return {"status": run["status"], "output": run["output"]}

    def commit_saved_once(conn: sa.Connection, run_id: str, sid: str, ref: dict[str, Any]) -> dict[str, Any]:
        return committed_outcome(conn, run_id, ref["step"]) or step_commits.commit_saved_step(conn, run_id, sid, ref)

    def commit_unsaved_once(conn: sa.Connection, run_id: str, sid: str, step: int, *rest: Any) -> dict[str, Any]:
        return committed_outcome(conn, run_id, step) or step_commits.commit_unsaved_step(conn, run_id, sid, step, *rest)

    once = {step_commits.append_checkpoint: append_once, step_commits.commit_saved_step: commit_saved_once, step_commits.commit_unsaved_step: commit_unsaved_once}
    original_tx = workflow.tx

    async def tx(name: str, fn: Any, *args: Any) -> Any:
        if FLAGS.plain_boundaries and fn in once:
            options: Any = {"name": name}
            return await DBOS.run_step_async(options, durable.plain_tx, once[fn], *args)  # type: ignore[call-overload]
        return await original_tx(name, fn, *args)

    workflow.tx = tx  # type: ignore[assignment]

    original_emit = store.emit
    original_record = store.record_result

    def emit(conn: sa.Connection, session_id: str, run_id: str | None, type_: str, data: Any) -> int:
        if not FLAGS.fewer_statements or conn.dialect.name != "postgresql":
            return original_emit(conn, session_id, run_id, type_, data)
        bump = (
            t.sessions.update()
            .where(t.sessions.c.session_id == session_id)
            .values(event_seq=t.sessions.c.event_seq + 1)
            .returning(t.sessions.c.event_seq)
            .cte("bump")
        )
        row = sa.select(
            sa.literal(session_id, t.events.c.session_id.type),
            bump.c.event_seq,
            sa.literal(run_id, t.events.c.run_id.type),
            sa.literal(type_, t.events.c.type.type),
            sa.literal(dict(data), t.events.c.data.type),
            sa.literal(store.now(), t.events.c.created_at.type),
        ).select_from(bump)
        stmt = t.events.insert().from_select(["session_id", "seq", "run_id", "type", "data", "created_at"], row).returning(t.events.c.seq)
        return int(conn.execute(stmt).scalar_one())

    def record_result(conn: sa.Connection, dispatch_id: str, attempt: int, run_id: str, status: str, *, result: Any = None, error: Any = None) -> bool:
        if not FLAGS.fewer_statements:
            return original_record(conn, dispatch_id, attempt, run_id, status, result=result, error=error)
        ts = store.now()
        row = conn.execute(
            t.calls.update()
            .where(t.calls.c.dispatch_id == dispatch_id, t.calls.c.attempts == attempt, t.calls.c.status == "running")
            .values(status=status, result=result, error=error, paired_by="body", settled_run_id=run_id, ended_at=ts)
            .returning(t.calls.c.session_id, t.calls.c.tool_name)
        ).first()
        conn.execute(
            t.attempts.update()
            .where(t.attempts.c.dispatch_id == dispatch_id, t.attempts.c.attempt == attempt, t.attempts.c.outcome.is_(None))
            .values(ended_at=ts, outcome=status if row is not None else "refused")
        )
        if row is not None:
            store.emit(conn, row.session_id, run_id, "tool_end", {"dispatch_id": dispatch_id, "tool_name": row.tool_name, "attempt": attempt, "status": status, "result": result, "error": error})
        return row is not None

    store.emit = emit  # type: ignore[assignment]
    store.record_result = record_result  # type: ignore[assignment]


def set_preping(runtime: Any, on: bool) -> None:
    from bench.dbcount import base_engine
    from helix_dbos.runtime.state import env

    for engine in (runtime.engine, env().datasource.engine):
        base_engine(engine).pool._pre_ping = on


VARIANTS: dict[str, Flags] = {
    "helix as is": Flags(),
    "+ no_preping": Flags(no_preping=True),
    "+ plain_boundaries": Flags(no_preping=True, plain_boundaries=True),
    "+ fewer_statements": Flags(no_preping=True, plain_boundaries=True, fewer_statements=True),
}


def main(argv: list[str] | None = None) -> int:
    from bench.dbcount import DbCounter, attach_standard, totals
    from bench.dbs import DEFAULT_PG_BASE, default_sqlite_dir, fresh_database
    from bench.harness import (
        _register_defaults,
        ameasure,
        format_table,
        setup_runners,
        teardown_runners,
    )
    from bench.workload import expected_answer

    p = argparse.ArgumentParser(prog="python -m bench.prototypes")
    p.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    p.add_argument("-n", type=int, default=15)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--pg-url", default=DEFAULT_PG_BASE)
    args = p.parse_args(argv)
    _register_defaults()
    from bench.baselines import make_bare_dbos_runner
    from bench.helix_runner import make_helix_runner

    install()
    spec = WorkloadSpec()
    for kind in (["sqlite", "postgres"] if args.db == "both" else [args.db]):
        with fresh_database(kind, "helix_bench_proto", pg_base=args.pg_url, sqlite_dir=default_sqlite_dir()) as url:
            runners = setup_runners(url, {"bare_dbos": make_bare_dbos_runner, "helix_dbos": make_helix_runner}, spec, reset=False)
            helix: Any = runners["helix_dbos"]

            def variant(flags: Flags, helix: Any = helix) -> Any:
                def run() -> Any:
                    FLAGS.__dict__.update(flags.__dict__)
                    set_preping(helix.runtime, not flags.no_preping)
                    try:
                        out = helix()
                    finally:
                        FLAGS.__dict__.update(Flags().__dict__)
                        set_preping(helix.runtime, True)
                    assert out == expected_answer(spec), out
                    return out

                return run

            timed = {"bare_dbos": runners["bare_dbos"], **{name: variant(f) for name, f in VARIANTS.items()}}
            try:
                counter = DbCounter()
                attach_standard(counter, helix.runtime)
                cost: dict[str, dict[str, int]] = {}
                for name, fn in timed.items():
                    asyncio.run(_once(fn))
                    before = counter.snapshot()
                    asyncio.run(_once(fn))
                    pre = dict(counter.pre_ping)
                    if name in VARIANTS and VARIANTS[name].no_preping:
                        pre = {k: False if k.startswith("helix") else v for k, v in pre.items()}
                    cost[name] = totals(counter.delta(counter.snapshot(), before), pre)
                counter.detach()
                stats = asyncio.run(ameasure(timed, args.n, args.warmup))
            finally:
                teardown_runners(runners)
            print(format_table(stats, title=f"== {kind}: fixes prototyped, interleaved, n={args.n}"))
            base = stats["helix as is"]["mean_ms"]
            for name in VARIANTS:
                c = cost[name]
                print(f"  {name:<20} {stats[name]['mean_ms'] / base:5.2f} x as-is time; per run: {c['tx']} tx, {c['stmts']} statements, {c['rtt']} est. round trips")
            c = cost["bare_dbos"]
            print(f"  {'bare_dbos':<20} per run: {c['tx']} tx, {c['stmts']} statements, {c['rtt']} est. round trips")
    return 0


async def _once(fn: Any) -> None:
    from bench.harness import _call

    await _call(fn)


if __name__ == "__main__":
    raise SystemExit(main())
