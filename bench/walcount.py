"""WAL bytes per run, by relation, on Postgres: a load-independent figure of a run's write cost.

    python -m bench --db postgres --sections cost      # part of the cost section (both systems)
    python -m bench.walcount [--pg-url URL] [-n RUNS] [--system helix|bare]

Why WAL and not time: on a shared machine the wall time of a run moves with the load, while the
bytes a run makes Postgres write (and fsync) do not. WAL is cluster-wide, so other databases on the
same server write into the same range: ``pg_walinspect`` reads the records of the range back and
keeps those whose blocks belong to this benchmark's database (commit records carry no block and are
left out; ``bench.dbcount`` counts the commits). Also read: the updates and HOT updates of each
helix table (``pg_stat_user_tables``), since an update that is not HOT writes every index again.
Needs a superuser connection (``CREATE EXTENSION pg_walinspect``, PG 15+).

Also read over the same runs: the CPU of this database's Postgres backends (``/proc``, when the server
runs on this machine: the runner's pools are fixed, so its backends live through the runs), and, when
the server preloads ``pg_stat_statements``, each statement's executor time per run (what the CPU is
spent on; a private cluster started with ``shared_preload_libraries = 'pg_stat_statements'`` has it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

import sqlalchemy as sa

from bench.dbs import configure_dbos, drop_postgres, fresh_postgres
from bench.workload import WorkloadSpec

DB_NAME = "helix_bench_wal"


def _lsn(conn: sa.Connection) -> str:
    """The WAL insert position, once it is flushed (``pg_walinspect`` reads only flushed WAL; an
    asynchronous commit is flushed by the WAL writer within ``wal_writer_delay``)."""
    lsn = str(conn.execute(sa.text("SELECT pg_current_wal_insert_lsn()")).scalar_one())
    while conn.execute(sa.text("SELECT pg_current_wal_flush_lsn() < CAST(:l AS pg_lsn)"), {"l": lsn}).scalar_one():
        time.sleep(0.01)
    return lsn


def _by_relation(conn: sa.Connection, start: str, end: str, db_oid: int) -> Counter[str]:
    """WAL bytes of the range whose first block is in database ``db_oid``, per relation, without the
    full-page images (a page's first change after a checkpoint: when checkpoints fall, not what a run
    writes; their total is ``(full-page images)``)."""
    rows = conn.execute(sa.text(
        "SELECT block_ref, record_length - fpi_length AS n, fpi_length AS fpi FROM pg_get_wal_records_info(:a, :b) WHERE block_ref LIKE :pat"),
        {"a": start, "b": end, "pat": f"%rel %/{db_oid}/%"}).mappings().all()
    names = {str(r["f"]): str(r["name"]) for r in conn.execute(sa.text(
        "SELECT pg_relation_filenode(c.oid) AS f, n.nspname || '.' || c.relname AS name FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE pg_relation_filenode(c.oid) IS NOT NULL")).mappings()}
    out: Counter[str] = Counter()
    for r in rows:
        ref = str(r["block_ref"])
        filenode = ref.split(f"/{db_oid}/", 1)[1].split()[0].split(",")[0]
        out[names.get(filenode, f"filenode {filenode}")] += int(r["n"])
        out["(full-page images)"] += int(r["fpi"])
    return out


def _updates(conn: sa.Connection) -> dict[str, tuple[int, int, int, int]]:
    """Per table: updates, HOT updates, sequential scans and the rows they read (a key lookup planned
    as a scan reads every row of its table: what grows with the ledger)."""
    rows = conn.execute(sa.text(
        "SELECT schemaname || '.' || relname AS t, n_tup_upd, n_tup_hot_upd, seq_scan, seq_tup_read FROM pg_stat_user_tables")).mappings()
    return {str(r["t"]): (int(r["n_tup_upd"]), int(r["n_tup_hot_upd"]), int(r["seq_scan"]), int(r["seq_tup_read"])) for r in rows}


STATS_IDLE_FLUSH_S = 10.5
"""A busy backend flushes its ``pg_stat_user_tables`` counters at most once a second and an idle one
within 10 s (PG 15's ``PGSTAT_IDLE_INTERVAL``): the warm-up runs' counters are in before the window
opens; the window's are flushed by closing the pools that hold them."""

BENCH_OWN = ("pg_get_wal_records_info", "pg_relation_filenode", "pg_current_wal", "pg_stat_activity", "pg_stat_user_tables", "pg_database")
"""Statements of this module's own reads (the WAL range, the backends' pids), left out of the profile."""


def _reset_statements(conn: sa.Connection) -> bool:
    """Start ``pg_stat_statements``' window, if the server preloads it (False: it does not)."""
    try:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
        conn.execute(sa.text("SELECT pg_stat_statements_reset()"))
    except sa.exc.DBAPIError:
        return False
    return True


def _statements(conn: sa.Connection, runs: int, top: int = 12) -> list[dict[str, Any]]:
    """This database's statements by executor time, per run (nested ones too: foreign-key checks)."""
    rows = conn.execute(sa.text(
        "SELECT s.calls, s.total_exec_time AS ms, s.wal_bytes, s.query FROM pg_stat_statements s "
        "WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND s.query NOT LIKE '%pg_stat_statements%' "
        "ORDER BY s.total_exec_time DESC")).mappings().all()
    rows = [r for r in rows if not any(own in str(r["query"]) for own in BENCH_OWN)]
    total = sum(float(r["ms"]) for r in rows)
    out = [{"query": "(all)", "calls": round(sum(int(r["calls"]) for r in rows) / runs, 1), "exec_ms": round(total / runs, 3),
            "wal_bytes": round(sum(int(r["wal_bytes"]) for r in rows) / runs)}]
    for r in rows[:top]:
        out.append({"query": " ".join(str(r["query"]).split())[:160], "calls": round(int(r["calls"]) / runs, 2),
                    "exec_ms": round(float(r["ms"]) / runs, 3), "wal_bytes": round(int(r["wal_bytes"]) / runs)})
    return out


def measure(pg_base: str, runs: int, system: str = "helix", warmup: int = 3) -> dict[str, Any]:
    url = fresh_postgres(pg_base, DB_NAME)
    try:
        spec = WorkloadSpec()
        configure_dbos(url, launch=False, executor_id="bench-wal")
        if system == "helix":
            from bench.systems.helix import HelixRunner

            runner: Any = HelixRunner(spec, database_url=url)
        else:
            import dbos

            from bench.systems.bare import make_runner

            run = make_runner(spec)
            dbos.DBOS.launch()
            loop = asyncio.new_event_loop()

            def runner() -> Any:  # the bare run is a coroutine; one loop for them all
                return loop.run_until_complete(run())
        admin = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"), poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
            db_oid = int(conn.execute(sa.text("SELECT oid FROM pg_database WHERE datname = current_database()")).scalar_one())
        for _ in range(warmup):
            runner()
        time.sleep(STATS_IDLE_FLUSH_S)  # an idle backend flushes its table counters within 10 s
        with admin.connect() as conn:
            before = _updates(conn)
            statements = _reset_statements(conn)
        by_rel: Counter[str] = Counter()
        from bench.scale import PgCpu

        watcher = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"), pool_size=1, max_overflow=0)
        cpu = PgCpu(watcher)
        with admin.connect() as conn:
            for _ in range(runs):  # read back after each run: other databases' WAL recycles segments fast
                start = _lsn(conn)
                runner()
                end = _lsn(conn)
                if end != start:
                    by_rel += _by_relation(conn, start, end, db_oid)
        pg_cpu_s = cpu.seconds()
        watcher.dispose()
        with admin.connect() as conn:
            top = _statements(conn, runs) if statements else []
        # a backend flushes its table counters when it exits: close the runner's pools (and DBOS's)
        if hasattr(runner, "close"):
            runner.close()
        import dbos

        dbos.DBOS.destroy(destroy_registry=True)
        time.sleep(1.0)
        with admin.connect() as conn:
            after = _updates(conn)
        admin.dispose()
        zero = (0, 0, 0, 0)
        upd = {t: tuple(a - b for a, b in zip(after[t], before.get(t, zero), strict=True)) for t in after}
        return {
            "system": system, "runs": runs,
            "wal_bytes_per_run": round((sum(by_rel.values()) - by_rel["(full-page images)"]) / runs),
            "by_relation_per_run": {k: round(v / runs) for k, v in by_rel.most_common(15)},
            "updates_per_run": {t: {"upd": round(d[0] / runs, 2), "hot": round(d[1] / runs, 2)} for t, d in sorted(upd.items()) if d[0]},
            "seq_scans_per_run": {t: {"scans": round(d[2] / runs, 2), "rows": round(d[3] / runs, 1)} for t, d in sorted(upd.items()) if d[2]},
            "pg_cpu_ms_per_run": round(pg_cpu_s * 1000 / runs, 1) if pg_cpu_s else None,
            "statements_per_run": top,
        }
    finally:
        import dbos

        dbos.DBOS.destroy(destroy_registry=True)
        drop_postgres(pg_base, DB_NAME)


def measure_both(pg_base: str, runs: int) -> dict[str, Any]:
    """``measure`` for helix and for bare DBOS (the cost section's WAL figures); a server that cannot
    (no ``pg_walinspect``, not a superuser) gives ``{"error": ...}`` instead of failing the bench."""
    out: dict[str, Any] = {}
    for system, name in (("bare", "bare_dbos"), ("helix", "helix_dbos")):
        try:
            out[name] = measure(pg_base, runs, system)
        except sa.exc.DBAPIError as exc:
            return {"error": str(exc).splitlines()[0]}
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--system", default="helix", choices=["helix", "bare"])
    args = p.parse_args(argv)
    print(json.dumps(measure(args.pg_url, args.n, args.system), indent=1), flush=True)  # noqa: T201 - the figures
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
