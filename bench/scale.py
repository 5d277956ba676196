"""Section `scale`: a front end that only enqueues, 1 and 2 worker processes, every shape side by side;
then the fleet-wide limits and the fairness between owners, read back from the ledger.

Postgres only. The shapes (`SHAPES`), in one run: `floor`, a DBOS workflow of plain `@DBOS.step`
functions, the same 5 steps x 3 calls, no pydantic-ai (`bench.systems.floor`); `bare`, the
pydantic-ai loop hand-written on DBOS (`bench.systems.bare`); `peer`, Pydantic AI's own `DBOSAgent`,
its `run` workflow enqueued by name (`bench.systems.pydantic_ai.make_peer_agent`), the peer a user
would pick instead; and helix. Each batch's cost is read by `bench.pgwatch` (backends opened,
Postgres CPU counting short-lived backends, peak connections per process, WAL); `run_big` is one
large batch checked against docs/scaling.md's capacity model.

For each worker count and each shape, a fresh database of its own (``run_shape(fresh=True)``) and
fresh `bench.worker` processes that define and serve only that shape's queue (`--serve
bare|floor|peer`: that workflow on its own queue; `--serve helix`: helix in `mode="worker"`, its
entry queue `helix_entries`; not the children's queue, which a worker serves only when one of its
agents has a remote or companion sub-agent, none here). One set of processes serving both sides
made each side's workers poll the other's idle queues through its batch, and the two did not pay
alike: bare DBOS's steps kept its workers' system-database pool busy, which
slowed their polls to about 1 a second, while helix's workers (their ledger on pools of their own)
polled bare's queue 10 times a second, ~8 ms of worker CPU per helix run at 300 sessions. This
process is the front end: floor, bare and peer runs are enqueued with `DBOSClient.enqueue`; helix sessions with
`Runtime(mode="client").start(...)`, the public entry (the gate and the enqueue in one transaction).
Both are enqueued from 5 threads. The queue settings are the same on both sides: `worker_concurrency =
ceil(N / workers)`, polled every 0.1 s (`bench.worker.QUEUE_POLL_S`, helix's Postgres default); helix's
entry queue is partitioned by owner (every session here has none: one partition, `-`), the bare one
is not. Per-run latency is enqueue to rest, read back from the database (DBOS's
`created_at`/`updated_at` for bare runs; the ledger's `created_at`/`ended_at` for helix); the batch
total is from the first enqueue to the last run's end.

Limits (`run_limits`, two fresh workers with room for `LIMIT_WORKER_CONCURRENCY` runs each and
`owner_share = LIMIT_OWNER_SHARE`): agent `bench_capped` has `max_running = CAP`; its sessions' runs in
flight at once are counted from the ledger (`started_at`/`ended_at` of `helix.runs`: inside DBOS's own
interval of the workflow, which the limit counts). Agent `bench_rated` has `model_requests = (rate, 1 s)`
across both workers; the most grants in any 1 s window (`helix.rate_grants`) over the rate is the
figure. Fairness: owner `burst` enqueues `--scale-sessions` sessions, then owner `solo` one; solo's wait
(`started_at - created_at`) against one run's time (the median `ended_at - started_at` of the burst's
runs), and how many of the burst, queued before solo, started after it.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bench.concurrency import BatchStats, _count, _stop_worker, _wait_bare, _wait_helix
from bench.stats import max_in_window, max_overlap, starts_over
from bench.systems.helix import CAP, CAPPED_AGENT, RATE, RATED_AGENT, limited_agents
from bench.workload import WorkloadSpec, expected_answer

LIMIT_WORKER_CONCURRENCY = 10
LIMIT_OWNER_SHARE = 5
CAPPED_SESSIONS = 40
RATED_SESSIONS = 10
"""6 model requests a run: 60 grants, at least 6 s at 10 a second."""


def _workers(url: str, n: int, share: int, extra: tuple[str, ...] = (), tag: str = "", serve: str = "both") -> list[Any]:
    import subprocess
    import sys

    from bench.concurrency import ROOT

    import tempfile

    procs = []
    for i in range(n):  # one at a time: the first migrates a fresh database
        # stderr to a file, not a pipe nobody reads while the batch runs: a worker that logs enough
        # would block on a full pipe and stall the batch
        err = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", "--db", url, "--executor", f"scale{tag}-{n}-{i + 1}", "--helix-mode", "worker", "--concurrency", str(share), "--serve", serve, *extra],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            proc.kill()
            err.seek(0)
            raise RuntimeError(f"worker did not start: {line!r} {err.read()[-3000:]}")
        procs.append(proc)
    return procs


def _backend_pids(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return [int(p) for p in conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalars()]


def _cpu_s(pids: set[int]) -> dict[int, float]:
    """User + system CPU seconds of these processes so far (/proc: the Postgres server on this machine; {} elsewhere)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            pass
    return out


def _spent(pids: set[int], before: dict[int, float]) -> float:
    after = _cpu_s(pids)
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


class PgCpu:
    """Postgres backend CPU spent by this database's connections over a batch.

    Sampled every ``every`` seconds from a thread, each backend's last reading kept: a backend that
    closes during the batch (a pool's overflow connection: DBOS's system-database pool under a burst)
    counts up to its last sample, not zero. Reading only the backends alive at the start and at the
    end missed those: bare DBOS's 1,000-session batch read 8.7 s where the whole private cluster
    spent 21 s (docs/benchmarks.md)."""

    def __init__(self, engine: sa.Engine, every: float = 0.25) -> None:
        import threading

        self.engine = engine
        self.before = _cpu_s(set(_backend_pids(engine)))
        self.last: dict[int, float] = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every,), name="bench-pgcpu", daemon=True)
        self._thread.start()

    def _sample(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.last.update(_cpu_s(set(_backend_pids(self.engine)) | set(self.last)))
            except sa.exc.DBAPIError:  # the pool of 2 busy with the waiter: next time
                pass

    def seconds(self) -> float:
        self._stop.set()
        self._thread.join()
        self.last.update(_cpu_s(set(_backend_pids(self.engine)) | set(self.last)))
        return sum(v - self.before.get(pid, 0.0) for pid, v in self.last.items())


SHAPES = ("floor", "bare", "peer", "helix")
"""The scale section's shapes, in the order each worker count runs them."""
SHAPE_RUNNER = {
    "floor": "floor_dbos_steps",  # a DBOS workflow of plain steps, no pydantic-ai
    "bare": "bare_dbos",  # the pydantic-ai loop hand-written on DBOS
    "peer": "peer_pydantic_ai_dbosagent",  # Pydantic AI's own DBOSAgent on a DBOS queue
    "helix": "helix_dbos",
}

#: docs/scaling.md's capacity model ("Capacity model"): CPU per step of the bench's shape (a run is
#: 6 model steps and 15 calls) and the front end's per enqueue, read at 2 workers x 1,000 sessions.
MODEL_WORKER_MS_PER_STEP = 24.0
MODEL_PG_MS_PER_STEP = 9.0
MODEL_FRONT_MS_PER_RUN = 11.3


def _front_for(shape: str, url: str, share: int) -> tuple[Any, Any]:
    """(enqueue one session -> its id, close) of the front end of ``shape``, in this process."""
    from dbos import DBOSClient

    from bench.dbs import APP_NAME, APP_VERSION
    from bench.worker import DBOS_QUEUES, QUEUE_POLL_S

    spec = WorkloadSpec()
    if shape == "helix":
        import helix_dbos as hx
        from bench.systems.helix import AGENT_NAME, make_agent

        front = hx.Runtime([make_agent(spec)], mode="client", database_url=url, application_version=APP_VERSION, app_name=APP_NAME,
                           worker_concurrency=share, api_pool=(5, 0)).launch()
        return (lambda: front.start(AGENT_NAME, spec.prompt).run_id), front.shutdown
    from bench.systems import bare, floor, pydantic_ai

    workflow = {"floor": floor.WORKFLOW_NAME, "bare": bare.WORKFLOW_NAME, "peer": pydantic_ai.PEER_WORKFLOW}[shape]
    kwargs: dict[str, Any] = {"deps": None} if shape == "peer" else {}  # DBOSAgent's run workflow: deps is keyword-only
    client = DBOSClient(system_database_url=url, application_name=APP_NAME, system_database_pool_size=5)
    client.register_queue(DBOS_QUEUES[shape], worker_concurrency=share, polling_interval_sec=QUEUE_POLL_S, on_conflict="always_update")
    opts: Any = {"queue_name": DBOS_QUEUES[shape], "workflow_name": workflow, "app_version": APP_VERSION}
    return (lambda: client.enqueue(opts, spec.prompt, **kwargs).get_workflow_id()), client.destroy


def _answer_ok(shape: str, url: str, ids: list[str]) -> bool:
    """The first and the last run's result is the shape's expected answer (the batch's statuses say the rest)."""
    from dbos import DBOSClient

    from bench.dbs import APP_NAME
    from bench.systems.floor import expected_floor_answer

    spec = WorkloadSpec()
    want = expected_floor_answer(spec) if shape == "floor" else expected_answer(spec)
    client = DBOSClient(system_database_url=url, application_name=APP_NAME, system_database_pool_size=1)
    try:
        for wid in {ids[0], ids[-1]}:
            got = client.retrieve_workflow(wid).get_result()
            if (got.output if shape == "peer" else got) != want:
                return False
        return True
    finally:
        client.destroy()


def run_shape(url: str, shape: str, sessions: int, workers: int, timeout: float = 1200, tag: str = "", concurrency: int | None = None,
              fresh: bool = True) -> dict[str, Any]:
    """``sessions`` runs of ``shape`` through a front end in this process, served by ``workers`` fresh
    ``bench.worker --serve SHAPE`` processes; the batch's times and its cost (``bench.pgwatch``).
    Each worker runs ``sessions / workers`` at once, or ``concurrency`` where that is less.

    ``fresh``: the batch runs in a database of its own, created for it beside ``url``'s and dropped
    after it, as the issue's independent benchmark ran each batch. In ``url``'s database every batch
    inherited the rows and dead row versions of those before it (the 2-worker helix batch followed
    three 1-worker helix batches and every other shape's), which on a server with autovacuum off,
    as this machine's is, nothing ever cleans up; one shape's batch then measured another's leftovers
    too (docs/benchmarks.md, "What is left", (g))."""
    if not fresh:
        return _run_shape_in(url, shape, sessions, workers, timeout, tag, concurrency)
    from bench.dbs import drop_postgres, fresh_postgres

    suffix = f"_{shape}_{workers}w{tag}".replace("-", "_")
    name = f"{sa.make_url(url).database}"[: NAME_MAX - len(suffix)] + suffix  # the suffix whole: Postgres would cut the end
    batch_url = fresh_postgres(url, name)
    try:
        return dict(_run_shape_in(batch_url, shape, sessions, workers, timeout, tag, concurrency), database=name)
    finally:
        drop_postgres(url, name)


def _run_shape_in(url: str, shape: str, sessions: int, workers: int, timeout: float, tag: str, concurrency: int | None) -> dict[str, Any]:
    import os

    from bench.pgwatch import PgWatch, own_engine

    share = -(-sessions // workers)
    if concurrency is not None:
        share = min(share, concurrency)
    procs = _workers(url, workers, share, serve=shape, tag=f"{tag}-{shape}")  # before the front: the first migrates a fresh database
    engine = own_engine(url)
    close = watch = None
    try:
        enqueue_one, close = _front_for(shape, url, share)
        with engine.connect(), engine.connect():  # the bench's own pool, opened before the batch's backends are counted
            pass
        pids = {proc.pid for proc in procs}
        watch = PgWatch(url, {**{p: "worker" for p in pids}, os.getpid(): "front"}, wal_by_db=sessions <= WAL_BY_DB_MAX_SESSIONS)
        w0, f0 = _cpu_s(pids), time.process_time()
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=5) as pool:
            ids = list(pool.map(lambda _: enqueue_one(), range(sessions)))
        enq = time.time() - t0
        label = f"{SHAPE_RUNNER[shape]}, {'front end + ' if shape == 'helix' else ''}{workers} worker(s)"
        if shape == "helix":
            rows = _wait_helix(engine, ids, timeout)
            end = max(r["ended_at"].timestamp() for r in rows)
            lat = [(r["ended_at"] - r["created_at"]).total_seconds() for r in rows]
            ok = sum(1 for r in rows if r["status"] == "completed" and r["output"] == expected_answer(WorkloadSpec()))
            statuses = _count(f"{r['status']} {r['error_code'] or ''}".strip() for r in rows)
            answer_ok: bool | None = ok == sessions
        else:
            rows = _wait_bare(engine, ids, timeout)
            end = max(r["updated_at"] for r in rows) / 1000.0
            lat = [(r["updated_at"] - r["created_at"]) / 1000.0 for r in rows]
            ok = sum(r["status"] == "SUCCESS" for r in rows)
            statuses = _count(r["status"] for r in rows)
            answer_ok = None  # read after the batch (a connection of its own)
        worker_cpu, f1 = _spent(pids, w0), time.process_time()
        cost = watch.stop_sampling()
        front_cpu = f1 - f0 - cost["watch_cpu_s"]  # the watcher's thread samples from this process: not the front end's cost
        batch = BatchStats(label, sessions, end - t0, lat, ok, _count(r["executor_id"] for r in rows), enq, statuses)
    finally:
        if close is not None:
            close()
        for proc in procs:
            _stop_worker(proc)
        engine.dispose()
        if watch is not None and not hasattr(watch, "result"):
            watch.close()
    cost = watch.finish()
    if answer_ok is None:
        answer_ok = _answer_ok(shape, url, ids)
    return dict(batch.summary(), shape=shape, workers=workers, answer_ok=answer_ok, worker_cpu_s=worker_cpu, front_cpu_s=front_cpu,
                pg_cpu_s=cost["pg_cpu_sampled_s"], **cost)


NAME_MAX = 63
"""Postgres's longest identifier: a longer database name is cut short without an error."""


WAL_BY_DB_MAX_SESSIONS = 2000
"""Above this, a batch's own WAL is not read back record by record (gigabytes of other databases' WAL
too on a shared server): the server-wide LSN delta only."""


REPEAT_SHAPES = ("bare", "helix")
"""The shapes ``--scale-repeats`` runs again: the two sides of the targets' ratio (helix / bare)."""


def run_scale(url: str, sessions: int = 1000, worker_counts: tuple[int, ...] = (1, 2), timeout: float = 1200,
              shapes: tuple[str, ...] = SHAPES, limits: bool = True, repeats: int = 1) -> dict[str, Any]:
    """For each worker count, every shape side by side (``SHAPES``), each through a front end; then the limits.

    ``repeats`` > 1: each worker count's side-by-side round is followed by ``repeats - 1`` more
    rounds of ``REPEAT_SHAPES`` alone, each round bare then helix, so the ratio is read as a median
    of rounds that each ran its two sides minutes apart. One round cannot tell 1.2x from 1.25x on
    this machine: the same command's helix / bare wall read 0.99x, 1.27x and 1.22x on three days."""
    out: dict[str, Any] = {"batches": {}, "shapes": list(shapes)}
    for workers in worker_counts:
        key = f"{workers}"
        out["batches"][key] = [run_shape(url, shape, sessions, workers, timeout) for shape in shapes]
        if repeats > 1:
            first = {b["shape"]: b for b in out["batches"][key] if b["shape"] in REPEAT_SHAPES}
            rounds = [first] + [{shape: run_shape(url, shape, sessions, workers, timeout, tag=f"-r{r}") for shape in REPEAT_SHAPES}
                                for r in range(2, repeats + 1)]
            out.setdefault("repeats", {})[key] = rounds
    if limits:
        out["limits"] = run_limits(url, sessions, timeout=timeout)
    return out


BIG_CONCURRENCY = 100
"""Runs in flight per worker in the large batch (docs/scaling.md's capacity model uses 100 a worker).
``sessions / workers`` at once (2,500 a worker at 10,000 on 4) collapsed the floor itself on this
machine: 614 of 10,000 plain-DBOS-steps runs done after 24 minutes, every run's steps queued on a
system-database pool of 8 connections behind 2,499 others'."""


def run_big(url: str, sessions: int = 10_000, workers: int = 4, shapes: tuple[str, ...] = ("floor", "helix"), timeout: float = 7200,
            concurrency: int = BIG_CONCURRENCY) -> dict[str, Any]:
    """One large batch per shape on ``workers`` processes, each running at most ``concurrency`` at
    once, and docs/scaling.md's capacity model against it.

    The model (each worker a core of its own, Postgres its own cores) predicts ``workers x 1000 /
    24`` steps a second; on one machine every process shares ``os.cpu_count()`` cores, so the model's
    CPU per step (worker 24 ms + Postgres 9 ms + the front end's 11.3 ms a run / 6) bounds it at
    ``cores x 1000 / 34.9``. The measured CPU per step is set beside the model's."""
    import os

    cores = os.cpu_count() or 1
    model_step_ms = MODEL_WORKER_MS_PER_STEP + MODEL_PG_MS_PER_STEP + MODEL_FRONT_MS_PER_RUN / WorkloadSpec().model_requests
    out: dict[str, Any] = {"sessions": sessions, "workers": workers, "cores": cores, "concurrency": concurrency, "batches": [], "model": {
        "worker_ms_per_step": MODEL_WORKER_MS_PER_STEP, "pg_ms_per_step": MODEL_PG_MS_PER_STEP, "front_ms_per_run": MODEL_FRONT_MS_PER_RUN,
        "steps_per_s_own_cores": workers * 1000 / MODEL_WORKER_MS_PER_STEP,
        "steps_per_s_this_machine": min(workers * 1000 / MODEL_WORKER_MS_PER_STEP, cores * 1000 / model_step_ms),
    }}
    steps = WorkloadSpec().model_requests
    for shape in shapes:
        b = run_shape(url, shape, sessions, workers, timeout, tag="-big", concurrency=concurrency)
        pg = b.get("pg_cpu_server_s") or b.get("pg_cpu_sampled_s") or 0.0
        b["steps_per_s"] = sessions * steps / b["total_s"]
        b["worker_ms_per_step"] = b["worker_cpu_s"] * 1000 / (sessions * steps)
        b["pg_ms_per_step"] = pg * 1000 / (sessions * steps)
        b["front_ms_per_run"] = b["front_cpu_s"] * 1000 / sessions
        out["batches"].append(b)
    return out


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def run_limits(url: str, burst: int, timeout: float = 1200) -> dict[str, Any]:
    """Two fresh workers with the limited agents: the concurrency cap, the rate, then the fairness burst."""
    import helix_dbos as hx
    from bench.dbs import APP_NAME, APP_VERSION
    from bench.systems.helix import AGENT_NAME, make_agent

    spec = WorkloadSpec()
    agents, limits = limited_agents(spec)
    procs = _workers(url, 2, LIMIT_WORKER_CONCURRENCY, ("--owner-share", str(LIMIT_OWNER_SHARE), "--limited", "--rate", str(RATE)), tag="-limits")
    front = hx.Runtime([make_agent(spec), *agents], mode="client", database_url=url, application_version=APP_VERSION, app_name=APP_NAME,
                       worker_concurrency=LIMIT_WORKER_CONCURRENCY, owner_share=LIMIT_OWNER_SHARE, limits=limits, api_pool=(5, 0)).launch()
    engine = sa.create_engine(url, pool_size=2, max_overflow=0)
    out: dict[str, Any] = {"cap": CAP, "rate": RATE, "worker_concurrency": LIMIT_WORKER_CONCURRENCY, "owner_share": LIMIT_OWNER_SHARE, "workers": 2}
    try:
        # the cap and the rate, side by side (their own queues and windows)
        with ThreadPoolExecutor(max_workers=5) as pool:
            capped = list(pool.map(lambda i: front.start(CAPPED_AGENT, spec.prompt, owner="capped").run_id, range(CAPPED_SESSIONS)))
            rated = list(pool.map(lambda i: front.start(RATED_AGENT, spec.prompt, owner="rated").run_id, range(RATED_SESSIONS)))
        rows = _wait_helix(engine, capped + rated, timeout)
        by_id = {r["run_id"]: r for r in rows}
        spans = [(by_id[i]["started_at"].timestamp(), by_id[i]["ended_at"].timestamp()) for i in capped if by_id[i]["started_at"] is not None]
        out["capped"] = {
            "sessions": CAPPED_SESSIONS,
            "completed": sum(by_id[i]["status"] == "completed" for i in capped),
            "max_in_flight": max_overlap(spans),
            "times_exceeded": starts_over(spans, CAP),
            "by_executor": _count(by_id[i]["executor_id"] for i in capped),
        }
        with engine.connect() as conn:
            grants = [float(g) for g in conn.execute(sa.text("SELECT granted_epoch FROM helix.rate_grants WHERE rate_key = :k"), {"k": f"agent:{RATED_AGENT}"}).scalars()]
        most = max_in_window(grants, 1.0) if grants else 0
        out["rated"] = {
            "sessions": RATED_SESSIONS,
            "completed": sum(by_id[i]["status"] == "completed" for i in rated),
            "grants": len(grants),
            "max_in_any_1s": most,
            "max_over_limit": most / RATE,
            "span_s": (max(grants) - min(grants)) if grants else 0.0,
            "by_executor": _count(by_id[i]["executor_id"] for i in rated),
        }

        # fairness: owner `burst` queues `burst` sessions, then owner `solo` one
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=5) as pool:
            burst_ids = list(pool.map(lambda i: front.start(AGENT_NAME, spec.prompt, owner="burst").run_id, range(burst)))
        enq = time.time() - t0
        solo = front.start(AGENT_NAME, spec.prompt, owner="solo").run_id
        s = _wait_helix(engine, [solo], timeout)[0]
        with engine.connect() as conn:
            b = [dict(r._mapping) for r in conn.execute(sa.text("SELECT run_id, status, created_at, started_at, ended_at FROM helix.runs WHERE run_id = ANY(:ids)"), {"ids": burst_ids})]
        done = [r for r in b if r["ended_at"] is not None and r["started_at"] is not None]
        one_run = statistics.median((r["ended_at"] - r["started_at"]).total_seconds() for r in done) if done else float("nan")
        wait = (s["started_at"] - s["created_at"]).total_seconds()
        overtaken = sum(1 for r in b if r["created_at"] < s["created_at"] and (r["started_at"] is None or r["started_at"] > s["started_at"]))
        out["fairness"] = {
            "burst": burst,
            "burst_enqueue_s": enq,
            "solo_status": s["status"],
            "solo_wait_s": wait,
            "one_run_s": one_run,
            "wait_over_one_run": wait / one_run if one_run == one_run and one_run > 0 else float("nan"),
            "burst_done_when_solo_ended": len(done),
            "burst_overtaken": overtaken,
        }
    finally:
        engine.dispose()
        front.shutdown()
        for proc in procs:  # the burst's queued rest stays queued in a database the section drops
            _stop_worker(proc)
    return out
