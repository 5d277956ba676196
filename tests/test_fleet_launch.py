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
from tests.support.fleet import WorkerPool, wait_for
from tests.support.procs import child_env, run_python_m

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
    """Four ``helix-dbos worker`` processes started at once on a database nothing migrated yet: each
    serves (the migration runs under its lock, the schema's creation included), and a run enqueued
    after runs its two bodies once each."""
    fleet = Pool(empty_db, tmp_path)
    pool.append(fleet)
    names = [f"w{i}" for i in range(4)]
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
