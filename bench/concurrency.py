"""Section 6: 200 sessions started at once, on one process and on two worker processes.

One process: the bench process launches DBOS once with the bare-DBOS workflow and helix on it,
then starts N runs at once from N threads, first N bare runs (`DBOS.start_workflow`), then N helix
sessions (`runtime.start(...).result()`, the runtime's in-process path). Each thread times its own
run (start call -> result); the batch is timed from the first start to the last result.

Two workers: two `bench.worker` processes share one Postgres database and serve DBOS queues. This
process is only a client: it enqueues N bare runs with `DBOSClient.enqueue`, then N helix runs,
each opened through the helix gate and enqueued in ONE transaction on the shared database
(`entries.open_run` + `DBOSClient.enqueue_in_transaction` of workflow `helix.run`, workflow id =
run id), which is the entry the runtime lacks (see docs/benchmarks.md). Per-run latency is read
back from the database (enqueue/creation time to end time), and which worker ran each run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.harness import BENCH_EXECUTOR, percentile
from bench.workload import WorkloadSpec, expected_answer

ROOT = Path(__file__).resolve().parent.parent

ONE_PROCESS_POOLS: dict[str, Any] = {"dbos": 10, "ds": (20, 10), "sync": (5, 0)}
"""Connection caps in the one-process case (bench/pools.py says why): ~47 connections at most
(helix's own default would be 20 + 20 datasource, 10 + 10 sync, DBOS 20: ~81)."""
"""Per worker process in the two-worker case: ~21 connections each, ~52 with the client's."""


@dataclass
class BatchStats:
    runner: str
    sessions: int
    total_s: float
    latencies_s: list[float]
    ok: int
    by_executor: dict[str, int] = field(default_factory=dict)
    enqueue_s: float = float("nan")
    statuses: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_s)
        return {
            "runner": self.runner,
            "sessions": self.sessions,
            "ok": self.ok,
            "total_s": self.total_s,
            "runs_per_s": self.sessions / self.total_s if self.total_s else float("nan"),
            "p50_s": percentile(lat, 50),
            "p95_s": percentile(lat, 95),
            "max_s": lat[-1] if lat else float("nan"),
            "mean_s": statistics.fmean(lat) if lat else float("nan"),
            "by_executor": self.by_executor,
            "enqueue_s": self.enqueue_s,
            "statuses": self.statuses,
        }


def _fire(n: int, fn: Any) -> tuple[float, list[float], list[Any]]:
    """Run `fn` n times at once on n threads (released together by a barrier)."""
    barrier = threading.Barrier(n + 1)
    latencies = [0.0] * n
    results: list[Any] = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        t = time.perf_counter()
        try:
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - any failure of a run is counted (not ok) and the batch goes on
            results[i] = exc
        latencies[i] = time.perf_counter() - t

    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        barrier.wait()
        t0 = time.perf_counter()
        for f in futures:
            f.result()
        total = time.perf_counter() - t0
    return total, latencies, results


def run_one_process(url: str, sessions: int = 200) -> list[BatchStats]:
    """N bare runs, then N helix sessions, all at once, in this process."""
    from dbos import DBOS

    from bench.dbs import configure_dbos
    from bench.systems.bare import make_runner as make_bare_dbos_runner
    from bench.systems.helix import HelixRunner

    spec = WorkloadSpec()
    expected = expected_answer(spec)
    sqlite = url.startswith("sqlite")  # pools are capped for Postgres's connection limit only
    configure_dbos(
        url,
        launch=False,
        reset=False,
        executor_id=BENCH_EXECUTOR,
        sys_db_pool_size=None if sqlite else ONE_PROCESS_POOLS["dbos"],
    )
    bare = make_bare_dbos_runner(spec)
    pools = {} if sqlite else {"tx_pool": ONE_PROCESS_POOLS["ds"], "api_pool": ONE_PROCESS_POOLS["sync"]}
    helix = HelixRunner(spec, database_url=url, **pools)
    out: list[BatchStats] = []
    try:
        runners = {
            "bare_dbos": lambda: DBOS.start_workflow(bare.workflow, spec.prompt).get_result(),  # type: ignore[attr-defined]
            "helix_dbos": lambda: helix.run().output,
        }
        for fn in runners.values():  # warm both paths
            fn()
        for name, fn in runners.items():
            total, lat, results = _fire(sessions, fn)
            statuses = _count(type(r).__name__ + (f": {str(r)[:200]}" if isinstance(r, Exception) else "") for r in results)
            out.append(BatchStats(name, sessions, total, lat, sum(1 for r in results if r == expected), statuses=statuses))
    finally:
        helix.close()
        DBOS.destroy(destroy_registry=True)
    return out


# --- two worker processes -----------------------------------------------------------------------


def _start_worker(url: str, executor: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.worker", "--db", url, "--executor", executor],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"worker {executor} did not start: {line!r} {proc.stderr.read()[-3000:] if proc.stderr else ''}")
    return proc


def _stop_worker(proc: subprocess.Popen[str]) -> None:
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _workflow_status() -> str:
    """DBOS's workflow table (Postgres only here), named through helix_dbos's one door to DBOS's internals."""
    from helix_dbos.runtime.process.dbos_private import system_table

    return system_table("workflow_status", sqlite=False)


WAIT_POLL_S = 0.5
"""How often a batch's waiter reads its runs back. The figures come from the database's timestamps, not
from when the waiter noticed, so a slower poll changes none of them; a 0.1 s poll of a 1,000-run
batch cost helix's side 5.7 ms of Postgres time per run (the join over 1,000 ids, 10 times a second),
charged to its `pg CPU` column."""


def _wait_bare(engine: sa.Engine, ids: list[str], timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    q = sa.text(
        f"SELECT workflow_uuid, status, created_at, updated_at, executor_id FROM {_workflow_status()} WHERE workflow_uuid = ANY(:ids)"
    )
    while True:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q, {"ids": ids})]
        if len(rows) == len(ids) and all(r["status"] in ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED") for r in rows):
            return rows
        if time.monotonic() > deadline:
            raise TimeoutError("bare runs did not finish")
        time.sleep(WAIT_POLL_S)


def _wait_helix(engine: sa.Engine, ids: list[str], timeout: float) -> list[dict[str, Any]]:
    from helix_dbos.ledger.statuses import RUN_AT_REST

    deadline = time.monotonic() + timeout
    q = sa.text(
        "SELECT r.run_id, r.status, r.error_code, r.error, r.output, r.created_at, r.started_at, r.ended_at, w.executor_id FROM helix.runs r "
        f"LEFT JOIN {_workflow_status()} w ON w.workflow_uuid = r.run_id WHERE r.run_id = ANY(:ids)"
    )
    while True:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q, {"ids": ids})]
        if len(rows) == len(ids) and all(r["status"] in RUN_AT_REST for r in rows):
            return rows
        if time.monotonic() > deadline:
            raise TimeoutError("helix runs did not finish")
        time.sleep(WAIT_POLL_S)


def run_two_workers(url: str, sessions: int = 200, workers: int = 2, timeout: float = 600) -> list[BatchStats]:
    """N bare runs, then N helix runs, on DBOS queues served by `workers` worker processes."""
    from dbos import DBOSClient

    from bench.dbs import APP_NAME, APP_VERSION
    from bench.systems.helix import AGENT_NAME, make_agent
    from bench.worker import BARE_QUEUE, QUEUE_POLL_S
    from helix_dbos.runtime.face import entries

    spec = WorkloadSpec()
    expected = expected_answer(spec)
    procs: list[subprocess.Popen[str]] = []
    try:
        for i in range(workers):  # one at a time: the first one migrates the fresh database
            procs.append(_start_worker(url, f"bench-worker-{i + 1}"))
        client = DBOSClient(system_database_url=url, application_name=APP_NAME, system_database_pool_size=5)
        # Without a per-worker limit, whichever worker polls first claims the whole burst; half the
        # batch each makes both workers serve it (the queues are otherwise as the workers made them).
        share = -(-sessions // workers)
        for queue in (BARE_QUEUE, "helix_runs"):
            client.register_queue(queue, worker_concurrency=share, polling_interval_sec=QUEUE_POLL_S, on_conflict="always_update")
        engine = sa.create_engine(url, pool_size=5, max_overflow=0)
        out: list[BatchStats] = []
        try:
            # bare DBOS: plain enqueue
            t0 = time.time()
            with ThreadPoolExecutor(max_workers=5) as pool:
                ids = list(
                    pool.map(
                        lambda _: client.enqueue(
                            {"queue_name": BARE_QUEUE, "workflow_name": "bench.bare.agent_run", "app_version": APP_VERSION}, spec.prompt
                        ).get_workflow_id(),
                        range(sessions),
                    )
                )
            enq = time.time() - t0
            rows = _wait_bare(engine, ids, timeout)
            end = max(r["updated_at"] for r in rows) / 1000.0
            outputs_ok = sum(1 for r in rows if r["status"] == "SUCCESS")
            lat = [(r["updated_at"] - r["created_at"]) / 1000.0 for r in rows]
            out.append(BatchStats("bare_dbos", sessions, end - t0, lat, outputs_ok, _count(r["executor_id"] for r in rows), enq, _count(r["status"] for r in rows)))

            # helix: gate + enqueue in one transaction
            agents = {AGENT_NAME: make_agent(spec)}

            def enqueue_helix(_: int) -> str:
                with engine.begin() as conn:
                    opened = entries.open_run(
                        conn, entries.EntryRequest(entry="start", session_id=None, agent_name=AGENT_NAME, message=spec.prompt), entries.Admission(agents, "full", None)
                    )
                    client.enqueue_in_transaction(
                        conn,
                        {"queue_name": "helix_runs", "workflow_name": "helix.run", "workflow_id": opened.run_id, "app_version": APP_VERSION},
                        opened.run_id,
                    )
                return str(opened.run_id)

            t0 = time.time()
            with ThreadPoolExecutor(max_workers=5) as pool:
                ids = list(pool.map(enqueue_helix, range(sessions)))
            enq = time.time() - t0
            rows = _wait_helix(engine, ids, timeout)
            end = max(r["ended_at"].timestamp() for r in rows)
            lat = [(r["ended_at"] - r["created_at"]).total_seconds() for r in rows]
            ok = sum(1 for r in rows if r["status"] == "completed" and r["output"] == expected)
            statuses = _count(f"{r['status']} {r['error_code'] or ''} {(r['error'] or '')[:200]}".strip() for r in rows)
            out.append(BatchStats("helix_dbos", sessions, end - t0, lat, ok, _count(r["executor_id"] for r in rows), enq, statuses))
        finally:
            engine.dispose()
            client.destroy()
        return out
    finally:
        for proc in procs:
            _stop_worker(proc)


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out
