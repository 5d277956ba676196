"""Section `scale`: a front end that only enqueues, 1 and 2 worker processes, against bare DBOS queues.

Postgres only. For each worker count, fresh `bench.worker` processes serve DBOS queues (helix in
`mode="worker"`: its entry queue `helix_entries`, the bare-DBOS workflow on its own queue). This
process is the front end: bare runs are enqueued with `DBOSClient.enqueue`; helix sessions with
`Runtime(mode="client").start(...)`, the public entry (the gate and the enqueue in one transaction).
Both are enqueued from 5 threads; both queues get `worker_concurrency = ceil(N / workers)`.
Per-run latency is enqueue to rest, read back from the database (DBOS's `created_at`/`updated_at`
for bare runs; the ledger's `created_at`/`ended_at` for helix); the batch total is from the first
enqueue to the last run's end.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa

from bench.concurrency import BatchStats, _count, _stop_worker, _wait_bare, _wait_helix
from bench.workload import WorkloadSpec, expected_answer


def _workers(url: str, n: int, share: int) -> list[Any]:
    import subprocess
    import sys

    from bench.concurrency import ROOT

    procs = []
    for i in range(n):  # one at a time: the first migrates a fresh database
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", "--db", url, "--executor", f"scale-{n}-{i + 1}", "--helix-mode", "worker", "--concurrency", str(share)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            proc.kill()
            raise RuntimeError(f"worker did not start: {line!r} {proc.stderr.read()[-3000:] if proc.stderr else ''}")
        procs.append(proc)
    return procs


def run_scale(url: str, sessions: int = 1000, worker_counts: tuple[int, ...] = (1, 2), timeout: float = 1200) -> dict[str, list[dict[str, Any]]]:
    """For each worker count: N bare runs, then N helix sessions, each through a front end."""
    from dbos import DBOSClient

    import helix_dbos as hx
    from bench.dbs import APP_NAME, APP_VERSION
    from bench.systems.helix import AGENT_NAME, make_agent
    from bench.worker import BARE_QUEUE, QUEUE_POLL_S

    spec = WorkloadSpec()
    expected = expected_answer(spec)
    out: dict[str, list[dict[str, Any]]] = {}
    for workers in worker_counts:
        share = -(-sessions // workers)
        procs = _workers(url, workers, share)
        try:
            client = DBOSClient(system_database_url=url, application_name=APP_NAME, system_database_pool_size=5)
            client.register_queue(BARE_QUEUE, worker_concurrency=share, polling_interval_sec=QUEUE_POLL_S, on_conflict="always_update")
            front = hx.Runtime([make_agent(spec)], mode="client", database_url=url, application_version=APP_VERSION, app_name=APP_NAME,
                               worker_concurrency=share, api_pool=(5, 0)).launch()
            engine = sa.create_engine(url, pool_size=2, max_overflow=0)
            batches: list[BatchStats] = []
            try:
                t0 = time.time()
                with ThreadPoolExecutor(max_workers=5) as pool:
                    ids = list(pool.map(
                        lambda _, c=client: c.enqueue({"queue_name": BARE_QUEUE, "workflow_name": "bench.bare.agent_run", "app_version": APP_VERSION}, spec.prompt).get_workflow_id(),
                        range(sessions),
                    ))
                enq = time.time() - t0
                rows = _wait_bare(engine, ids, timeout)
                end = max(r["updated_at"] for r in rows) / 1000.0
                lat = [(r["updated_at"] - r["created_at"]) / 1000.0 for r in rows]
                batches.append(BatchStats(f"bare_dbos, {workers} worker(s)", sessions, end - t0, lat, sum(r["status"] == "SUCCESS" for r in rows),
                                          _count(r["executor_id"] for r in rows), enq, _count(r["status"] for r in rows)))

                t0 = time.time()
                with ThreadPoolExecutor(max_workers=5) as pool:
                    ids = list(pool.map(lambda _, rt=front: rt.start(AGENT_NAME, spec.prompt).run_id, range(sessions)))
                enq = time.time() - t0
                rows = _wait_helix(engine, ids, timeout)
                end = max(r["ended_at"].timestamp() for r in rows)
                lat = [(r["ended_at"] - r["created_at"]).total_seconds() for r in rows]
                ok = sum(1 for r in rows if r["status"] == "completed" and r["output"] == expected)
                batches.append(BatchStats(f"helix_dbos, front end + {workers} worker(s)", sessions, end - t0, lat, ok, _count(r["executor_id"] for r in rows), enq,
                                          _count(f"{r['status']} {r['error_code'] or ''}".strip() for r in rows)))
            finally:
                engine.dispose()
                front.shutdown()
                client.destroy()
            out[f"{workers}"] = [b.summary() for b in batches]
        finally:
            for proc in procs:
                _stop_worker(proc)
    return out
