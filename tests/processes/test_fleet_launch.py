"""A fleet's launch: processes started together on an empty database, and processes that disagree.

Real ``helix-dbos worker`` processes (``tests/scenarios/fleet_app.py``'s app) and real front ends
(its ``enqueue`` command, a ``Runtime(mode="client")``); what they did is counted outside the
runtime, in the fleet app's effect files and the ledger's rows read with plain SQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, _pg_available
from tests.support.crashkit import query
from tests.support.fleet import WorkerPool
from tests.support.procs import child_env, run_python_m
from tests.support.waiting import wait_for

APP = "tests.scenarios.fleet_app:runtime"


def _admin() -> sa.Engine:
    return sa.create_engine(make_url(PG_URL).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nothing ever touched: no file yet, or a Postgres database without any schema of
    ours (not cloned from the migrated template)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite'}"
        return
    error = _pg_available()
    if error is not None:
        pytest.skip(f"PostgreSQL is not reachable ({error})")
    name = f"helix_e_{uuid.uuid4().hex[:12]}"
    with _admin().connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(PG_URL).set(database=name, drivername="postgresql").render_as_string(hide_password=False)
    finally:
        with _admin().connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


class Pool(WorkerPool):
    def __init__(self, db_url: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(db_url, workdir, {"FLEET_DELAY": "0.2", **(env or {})}, app=APP, effects_var="FLEET_EFFECTS")

    def front_end(self, prefix: str, count: int, *, agent: str = "fleet", **extra: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "tests.scenarios.fleet_app", "--db", self.db_url, "enqueue", "--agent", agent, "--count", str(count), "--prefix", prefix]
        return run_python_m(args, child_env(extra={**self.env, **extra}), timeout=240)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[list[Pool]]:
    made: list[Pool] = []
    yield made
    for p in made:
        p.stop_all()


def test_workers_started_together_on_an_empty_database_all_start(empty_db: str, tmp_path: Path, pool: list[Pool]) -> None:
    """Three ``helix-dbos worker`` processes started at once on a database nothing migrated yet: each
    serves (the migration runs under its lock, the schema's creation included), and a run enqueued
    after runs its two bodies once each."""
    fleet = Pool(empty_db, tmp_path)
    pool.append(fleet)
    names = [f"w{i}" for i in range(3)]
    procs = [fleet.spawn(name) for name in names]  # all started before any is read
    for name, proc in zip(names, procs, strict=True):
        fleet.ready(name, proc)
        assert proc.poll() is None, fleet.log_of(name)
    done = fleet.front_end("s", 1)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = wait_for("the run at rest", lambda: fleet.all_at_rest(1))
    assert [r["status"] for r in runs] == ["completed"], runs
    bodies = fleet.effects_of("bodies")
    assert sorted(b["tool"] for b in bodies) == ["send", "work"], bodies
    for name in names:
        assert "Traceback" not in fleet.log_of(name), fleet.log_of(name)


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _refused_worker(fleet: Pool, executor: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = child_env(extra={**fleet.env, "HELIX_DBOS_EXECUTOR_ID": executor, **extra})
    args = [sys.executable, "-m", "helix_dbos.cli.main", "worker", "--app", APP, "--db", fleet.db_url]
    # a plain subprocess, not the fork server's: the CLI reconfigures its own streams (as a user's shell gives them)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=240, check=False)


def test_a_front_end_whose_limit_the_workers_lack_is_refused_at_launch(db_url: str, tmp_path: Path, pool: list[Pool]) -> None:
    """A worker without ``max_running`` for ``capped`` records the fleet's limits first; a front end
    that defines ``max_running=1`` for it is refused ``limits_mismatch`` naming the agent and both
    values, and admits nothing (its runs would have waited on a queue no worker serves). A front end
    that agrees admits, and the worker runs what it admits."""
    fleet = Pool(db_url, tmp_path)
    pool.append(fleet)
    fleet.worker("w0")
    refused = fleet.front_end("cap", 2, agent="capped", FLEET_MAX_RUNNING="1")
    assert refused.returncode != 0, refused.stdout
    last = refused.stderr.strip().splitlines()[-1]
    assert "LimitsMismatchError" in last and "'capped'" in last, refused.stderr[-3000:]
    assert "defines AgentLimits(max_running=1)" in last and "says no limits" in last and "a worker (pid" in last, last
    assert fleet.runs() == [] and fleet.effects_of("bodies") == []  # nothing admitted, nothing ran
    agreed = fleet.front_end("ok", 2, agent="capped")
    assert agreed.returncode == 0, agreed.stderr[-3000:]
    runs = wait_for("the agreeing front end's runs at rest", lambda: fleet.all_at_rest(2))
    assert sorted(r["status"] for r in runs) == ["completed", "completed"], runs
    assert len(fleet.effects_of("bodies")) == 4, fleet.effects_of("bodies")


def test_a_worker_whose_limit_the_front_end_lacks_is_refused_at_launch(db_url: str, tmp_path: Path, pool: list[Pool]) -> None:
    """A front end without ``max_running`` for ``capped`` admits a run first; a worker that defines
    ``max_running=1`` for it (and would have served ``capped``'s own queue, bypassing nothing but
    running the shared one without the limit) exits 2 with one typed line naming the agent and both
    values, and runs nothing; a worker that agrees runs the queued run."""
    fleet = Pool(db_url, tmp_path)
    pool.append(fleet)
    admitted = fleet.front_end("q", 1, agent="capped")
    assert admitted.returncode == 0, admitted.stderr[-3000:]
    refused = _refused_worker(fleet, "w-limited", FLEET_MAX_RUNNING="1")
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-3000:])
    assert "limits_mismatch" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert "'capped'" in refused.stderr and "AgentLimits(max_running=1)" in refused.stderr and "no limits" in refused.stderr, refused.stderr
    assert "a front end (pid" in refused.stderr, refused.stderr
    assert [r["status"] for r in fleet.runs()] == ["queued"] and fleet.effects_of("bodies") == []
    fleet.worker("w-agrees")
    runs = wait_for("the queued run at rest", lambda: fleet.all_at_rest(1))
    assert [r["status"] for r in runs] == ["completed"], runs
    assert len(fleet.effects_of("bodies")) == 2, fleet.effects_of("bodies")


def test_a_limit_changed_on_purpose_replaces_the_record(db_url: str, tmp_path: Path, pool: list[Pool]) -> None:
    """``HELIX_DBOS_REPLACE_LIMITS=1``: the launch's limits become the record, and a process that
    still defines the old ones is then the one refused; another application version has its own
    record, so a deploy under a new version changes its limits without the override."""
    fleet = Pool(db_url, tmp_path)
    pool.append(fleet)
    assert fleet.front_end("a", 0, agent="capped").returncode == 0  # records: no limits
    assert fleet.front_end("b", 0, agent="capped", FLEET_MAX_RUNNING="2").returncode != 0
    assert fleet.front_end("c", 0, agent="capped", FLEET_MAX_RUNNING="2", HELIX_DBOS_REPLACE_LIMITS="1").returncode == 0
    stale = fleet.front_end("d", 0, agent="capped")
    assert stale.returncode != 0 and "says AgentLimits(max_running=2)" in stale.stderr, stale.stderr[-2000:]
    assert fleet.front_end("e", 0, agent="capped", FLEET_MAX_RUNNING="5", HELIX_DBOS_APP_VERSION="v2").returncode == 0
    table = "agent_limits" if db_url.startswith("sqlite") else "helix.agent_limits"
    rows = {(r["application_version"], r["agent_name"]): r["max_running"] for r in query(db_url, f"SELECT * FROM {table}")}
    assert rows == {("helix-dbos-1", "fleet"): None, ("helix-dbos-1", "capped"): 2, ("v2", "fleet"): None, ("v2", "capped"): 5}, rows


@pytest.mark.parametrize("round_", range(2))
def test_migrations_started_at_one_instant_on_an_empty_database_all_succeed(empty_db: str, round_: int) -> None:
    """Six processes released at the same instant into the launch's migration (``upgrade``) of a
    database nothing migrated: each exits 0. Before the schema's creation moved under the migration
    lock, about one round in four on Postgres ended one of them in ``UniqueViolation`` on
    ``CREATE SCHEMA IF NOT EXISTS helix``."""
    import time

    at = time.time() + 3.0  # every process imported and waiting before the instant
    code = f"import sys, time; from helix_dbos.ledger.migrate import upgrade; time.sleep(max(0.0, {at} - time.time())); upgrade(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, empty_db], stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(code == 0 for code, _ in results), [err[-1500:] for _, err in results]


@pytest.mark.parametrize("sync", ["", "1", "loop"])
def test_a_drain_with_a_stuck_body_exits_within_its_timeout(db_url: str, tmp_path: Path, pool: list[Pool], sync: str) -> None:
    """``helix-dbos worker --drain-timeout 5`` with a body stuck for 60 s (async, sync in its thread,
    or a sync wait inside an async body that blocks DBOS's event loop itself): SIGTERM to exit 0
    within the drain timeout plus the shutdown's own work, never DBOS's extra 10 s for a loop that
    will not stop (15.1 s measured before), and the run is left pending for another worker."""
    import signal
    import time

    from tests.processes.test_scale_fleet import in_flight

    fleet = Pool(db_url, tmp_path, {"FLEET_DELAY": "60", "FLEET_SYNC": sync})
    pool.append(fleet)
    w = fleet.worker("w-stuck", drain_timeout=5)
    assert fleet.front_end("stuck", 1).returncode == 0
    wait_for("the body in flight", lambda: in_flight(fleet.effects, w.pid))
    signalled = time.monotonic()
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0
    took = time.monotonic() - signalled
    assert took < 9.0, took
    assert w.stdout is not None
    drained = json.loads(w.stdout.read().strip().splitlines()[-1])
    [run] = fleet.runs()
    assert drained["left_pending"] == [run["run_id"]] and run["status"] == "running", (drained, run)
    assert fleet.effects_of("bodies") and fleet.effects_of("body_ends") == []  # no body finished here
