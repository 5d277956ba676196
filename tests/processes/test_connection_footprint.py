"""Every process holds a fixed number of Postgres connections, the sum docs/operations.md gives.

The load test runs a real ``helix-dbos worker`` and a front end (``Runtime(mode="client")``) that
enqueues 150 sessions into it while it runs (each run's two tools overlap), and samples the
processes' backends in ``pg_stat_activity`` throughout (found by their sockets, named or not):
neither ever holds more than the footprint it reports, and the database sees no more sessions
opened than those pools plus the launches' few one-off connections (pools with overflow opened and
closed a connection per burst: 240 sessions and 63 at once for one worker under this load).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError
from helix_dbos.runtime.process import pools
from helix_dbos.settings import from_environ
from tests.support.backends import BackendSampler, SessionCounter, client_ports
from tests.support.fleet import WorkerPool
from tests.support.pgbouncer import PgBouncer
from tests.support.pgbouncer import binary as pgbouncer_binary
from tests.support.procs import child_env, popen_python_m
from tests.support.waiting import wait_for

APP = "tests.scenarios.fleet_app:runtime"
SESSIONS = 150
#: One-off connections of a launch, beside its pools: the ledger's migration check, and DBOS's
#: check of its schema (helix's own launch and a front end's each open one of each at most).
LAUNCH_EXTRA = 2
#: The test's own connections: the two samplers' and the session counter's.
OBSERVERS = 3


def _nothing_set() -> dict[str, str]:
    return {"HELIX_DBOS_API_POOL": "", "HELIX_DBOS_TX_POOL": "", "HELIX_DBOS_DBOS_POOL": ""}


def test_pools_are_sized_from_the_mode_and_the_run_concurrency() -> None:
    env = from_environ(_nothing_set())
    assert pools.api_pool("process", None, env) == pools.Pool(5)
    assert pools.api_pool("worker", None, env) == pools.Pool(5)
    assert pools.api_pool("client", None, env) == pools.Pool(10)  # a front end's only pool
    assert pools.tx_pool(None, env, None) == pools.Pool(10)
    assert pools.tx_pool(None, env, 3) == pools.Pool(6)  # twice worker_concurrency where that is less
    assert pools.tx_pool(None, env, 50) == pools.Pool(10)
    assert pools.dbos_pool(None, env) == pools.Pool(10)
    footprint = pools.Footprint("worker", pools.Pool(5), pools.Pool(10), pools.Pool(10), 1, 1)
    assert footprint.as_dict() == {"api": 5, "tx": 10, "dbos": 10, "listener": 1, "lock": 1, "total": 27}
    assert not footprint.churns


def test_the_variables_and_the_arguments_override_the_sizes() -> None:
    env = from_environ({"HELIX_DBOS_API_POOL": "2", "HELIX_DBOS_TX_POOL": "3", "HELIX_DBOS_DBOS_POOL": "4"})
    assert pools.api_pool("client", None, env) == pools.Pool(2)
    assert pools.tx_pool(None, env, 50) == pools.Pool(3)
    assert pools.dbos_pool(None, env) == pools.Pool(4)
    assert pools.tx_pool(pools.check_pool("tx_pool", 7), env, None) == pools.Pool(7)  # the argument wins
    assert pools.check_pool("api_pool", (4, 2)) == pools.Pool(4, 2)
    assert pools.Footprint("process", pools.Pool(4, 2), None, None, 0, 0).churns


@pytest.mark.parametrize("bad", [0, -1, (0, 0), (2, -1), (1, 2, 3), "5", 2.5, True])
def test_a_bad_pool_size_is_refused_typed(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="tx_pool must be a pool size"):
        hx.Runtime([], tx_pool=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="dbos_pool must be a pool size"):
        hx.Runtime([], dbos_pool=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["0", "x", "100000"])
def test_a_bad_pool_variable_is_refused_typed(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="HELIX_DBOS_TX_POOL"):
        from_environ({"HELIX_DBOS_TX_POOL": raw})


def test_a_launched_runtime_names_every_connection_and_holds_its_footprint(pg_url: str) -> None:
    """In-process, with the sizes given as arguments: the footprint reports them, and this process's
    backends on the database (its sockets) are all named by helix and never more than that sum."""
    agent = hx.Agent("a", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("hi")])))
    executor = f"fp-{uuid.uuid4().hex[:6]}"
    rt = hx.Runtime([agent], database_url=pg_url, executor_id=executor, api_pool=2, tx_pool=3, dbos_pool=4).launch()
    try:
        assert rt.connection_footprint() == {"api": 2, "tx": 3, "dbos": 4, "listener": 1, "lock": 1, "total": 11}
        for i in range(6):
            rt.start("a", f"hello {i}").result(timeout=120)
        url = sa.engine.make_url(pg_url)
        ports = client_ports(os.getpid(), int(url.port or 5432))
        engine = sa.create_engine(url.set(drivername="postgresql+psycopg"), poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT application_name FROM pg_stat_activity WHERE datname = :d AND client_port = ANY(:p) AND pid <> pg_backend_pid()"),
                {"d": url.database, "p": sorted(ports)},
            ).scalars().all()
        engine.dispose()
        names = set(rows)
        assert len(rows) <= 11, rows
        assert names <= {f"helix-dbos:process:{p}:{executor}" for p in ("api", "tx", "dbos")} | {"helix-executor-lock"}, names
        assert {f"helix-dbos:process:dbos:{executor}", "helix-executor-lock"} <= names
    finally:
        rt.shutdown()


@pytest.mark.kills
def test_a_worker_under_load_never_exceeds_its_footprint_nor_churns(pg_url: str, tmp_path: Path) -> None:
    fleet = WorkerPool(pg_url, tmp_path, {"FLEET_DELAY": "0.5"}, app=APP, effects_var="FLEET_EFFECTS")
    counter = SessionCounter(pg_url)
    samplers: list[BackendSampler] = []
    front: subprocess.Popen[str] | None = None
    try:
        before = counter.settled()
        worker = fleet.worker("footprint-w1")
        footprint = fleet.ready_lines["footprint-w1"]["connections"]
        assert footprint["total"] == footprint["api"] + footprint["tx"] + footprint["dbos"] + 2  # the listener and the lock
        samplers.append(BackendSampler(pg_url, worker.pid).start())
        front = popen_python_m(
            [sys.executable, "-m", "tests.scenarios.fleet_app", "--db", pg_url, "enqueue", "--count", str(SESSIONS), "--prefix", "load"],
            child_env(extra=fleet.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        samplers.append(BackendSampler(pg_url, front.pid).start())
        out, err = front.communicate(timeout=600)
        assert front.returncode == 0, err[-3000:]
        front_footprint = json.loads(out.splitlines()[-1])["connections"]
        assert front_footprint["total"] == front_footprint["api"]  # a front end holds its API pool only
        wait_for("every run at rest", lambda: counter.runs_at_rest() == SESSIONS, timeout=600)  # polled on the counter's connection
        for s in samplers:
            s.stop()
        fleet.stop_all()
        opened = counter.settled() - before
    finally:
        for s in samplers:
            s.stop() if s._thread is not None and s._thread.is_alive() else None
        if front is not None and front.poll() is None:
            front.kill()
        fleet.stop_all()
        counter.close()
    w, f = samplers
    assert {r["status"] for r in fleet.runs()} == {"completed"}
    # the worker: never more than its footprint at once, and the same connections throughout
    assert len(w.samples) > 20, "the sampler saw too little of the load"
    assert w.peak <= footprint["total"], (w.peak, footprint)
    assert len(w.distinct) <= footprint["total"], (len(w.distinct), footprint)
    assert w.names <= {f"helix-dbos:worker:{p}:footprint-w1" for p in ("api", "tx", "dbos")} | {"helix-executor-lock"}, w.names
    # the front end likewise (plus its launch's one-off connections)
    assert f.peak <= front_footprint["total"] + LAUNCH_EXTRA, (f.peak, front_footprint)
    # every session opened on the database while both ran: their pools and their launches' few
    # one-off connections, nothing per run (pools with overflow opened hundreds here)
    bound = footprint["total"] + front_footprint["total"] + 2 * LAUNCH_EXTRA + OBSERVERS
    assert opened <= bound, (opened, bound, footprint, front_footprint)


@pytest.fixture
def pgbouncer(pg_url: str) -> Iterator[PgBouncer]:
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer); the PgBouncer test needs it")
    bouncer = PgBouncer(pg_url, pool_size=4)
    try:
        yield bouncer
    finally:
        bouncer.stop()


def _overlapping_agent() -> hx.Agent:
    async def look(key: str) -> str:
        """Look something up (takes a moment)."""
        await asyncio.sleep(0.05)
        return f"looked {key}"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("look", {"key": "a"}, tool_call_id="c-a"), ToolCallPart("look", {"key": "b"}, tool_call_id="c-b")])
        return ModelResponse(parts=[TextPart("done")])

    return hx.Agent("overlap", FunctionModel(reply), tools=[hx.tool(replay="safe")(look)])


def test_the_api_and_transaction_pools_run_through_pgbouncer_in_transaction_mode(pg_url: str, pgbouncer: PgBouncer) -> None:
    """``pooler_url``: helix's own pools go through a transaction-mode PgBouncer (4 server
    connections) while the executor lock and DBOS keep their direct sessions; runs with tools that
    overlap complete (psycopg's prepared statements would not survive a change of server session),
    and Postgres sees only DBOS's pool, its listener and the lock from this process directly."""
    executor = f"pgb-{uuid.uuid4().hex[:6]}"
    rt = hx.Runtime([_overlapping_agent()], database_url=pg_url, pooler_url=pgbouncer.url_for(pg_url), executor_id=executor,
                    api_pool=3, tx_pool=3, dbos_pool=3).launch()
    try:
        handles = [rt.start("overlap", f"go {i}") for i in range(12)]
        results = [h.result(timeout=180) for h in handles]
        assert [r.status for r in results] == ["completed"] * 12
        server_port = int(sa.engine.make_url(pg_url).port or 5432)
        direct, through = client_ports(os.getpid(), server_port), client_ports(os.getpid(), pgbouncer.port)
        assert 0 < len(through) <= 3 + 3  # helix's pools, to PgBouncer
        bouncer_side = client_ports(pgbouncer.proc.pid, server_port)
        assert 0 < len(bouncer_side) <= pgbouncer.pool_size
        url = sa.engine.make_url(pg_url)
        engine = sa.create_engine(url.set(drivername="postgresql+psycopg"), poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            names = conn.execute(
                sa.text("SELECT application_name FROM pg_stat_activity WHERE datname = :d AND client_port = ANY(:p)"),
                {"d": url.database, "p": sorted(direct)},
            ).scalars().all()
        engine.dispose()
        assert len(names) <= 3 + 1 + 1, names  # DBOS's pool, its listener, the lock
        assert set(names) <= {f"helix-dbos:process:dbos:{executor}", "helix-executor-lock"}, names
    finally:
        rt.shutdown()


def test_a_pooler_url_beside_sqlite_is_refused_typed(tmp_path: Path) -> None:
    rt = hx.Runtime([_overlapping_agent()], database_url=f"sqlite:///{tmp_path / 'x.sqlite'}", pooler_url="postgresql://postgres@127.0.0.1:6432/x")
    with pytest.raises(ConfigurationError, match="pooler_url"):
        rt.launch()
