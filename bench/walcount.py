"""WAL bytes per run, by relation, on Postgres: a load-independent figure of a run's write cost.

    python -m bench.walcount [--pg-url URL] [-n RUNS] [--system helix|bare]

Why WAL and not time: on a shared machine the wall time of a run moves with the load, while the
bytes a run makes Postgres write (and fsync) do not. WAL is cluster-wide, so other databases on the
same server write into the same range: ``pg_walinspect`` reads the records of the range back and
keeps those whose blocks belong to this benchmark's database (commit records carry no block and are
left out; ``bench.dbcount`` counts the commits). Also read: the updates and HOT updates of each
helix table (``pg_stat_user_tables``), since an update that is not HOT writes every index again.
Needs a superuser connection (``CREATE EXTENSION pg_walinspect``, PG 15+).
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


def _updates(conn: sa.Connection) -> dict[str, tuple[int, int]]:
    rows = conn.execute(sa.text("SELECT schemaname || '.' || relname AS t, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables")).mappings()
    return {str(r["t"]): (int(r["n_tup_upd"]), int(r["n_tup_hot_upd"])) for r in rows}


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
        time.sleep(1.0)  # the stats collector's last flush before the window
        with admin.connect() as conn:
            before = _updates(conn)
        by_rel: Counter[str] = Counter()
        with admin.connect() as conn:
            for _ in range(runs):  # read back after each run: other databases' WAL recycles segments fast
                start = _lsn(conn)
                runner()
                end = _lsn(conn)
                if end != start:
                    by_rel += _by_relation(conn, start, end, db_oid)
        time.sleep(1.5)  # pg_stat counters are flushed by the backends at most every second
        with admin.connect() as conn:
            after = _updates(conn)
        runner.close() if hasattr(runner, "close") else None
        admin.dispose()
        upd = {t: (after[t][0] - before.get(t, (0, 0))[0], after[t][1] - before.get(t, (0, 0))[1]) for t in after}
        return {
            "system": system, "runs": runs,
            "wal_bytes_per_run": round((sum(by_rel.values()) - by_rel["(full-page images)"]) / runs),
            "by_relation_per_run": {k: round(v / runs) for k, v in by_rel.most_common(15)},
            "updates_per_run": {t: {"upd": round(u / runs, 2), "hot": round(h / runs, 2)} for t, (u, h) in sorted(upd.items()) if u},
        }
    finally:
        import dbos

        dbos.DBOS.destroy(destroy_registry=True)
        drop_postgres(pg_base, DB_NAME)


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
