"""The executor lock survives a lost connection, and no other role can hold it against its executor.

A live process whose lock connection is cut either re-acquires the lock before anything else runs
(then a second process is refused) or exits loudly before the second one acts; bodies are counted
from the scenario app's effect files, outside the runtime. The read-only audit role cannot block an
executor's start or its recovery, even squatting every advisory lock it can see.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.engine import make_url

import helix_dbos as hx
from helix_dbos.cli import admin
from helix_dbos.errors import ExecutorIdInUseError
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.runtime.process.executor_lock import (
    APPLICATION_NAME,
    LOCK_LOST_EXIT_CODE,
    AdvisoryBackend,
    ExecutorLock,
    FileBackend,
)
from tests.support.crashkit import Kit, calls_by_tool, transcript_problems
from tests.support.procs import SETTINGS_VARS, child_env, run_python_m


def _admin(db_url: str) -> sa.Engine:
    return create_sync_engine(db_url.rsplit("/", 1)[0] + "/postgres", poolclass=sa.pool.NullPool)


def _lock_pids(db_url: str) -> list[int]:
    """The executor-lock connections of this test's database only (never another test's)."""
    engine = _admin(db_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(
                sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d AND application_name = :a ORDER BY pid"),
                {"d": make_url(db_url).database, "a": APPLICATION_NAME},
            ).scalars())
    finally:
        engine.dispose()


def _cut(db_url: str, pids: list[int]) -> None:
    engine = _admin(db_url)
    try:
        with engine.begin() as conn:
            done = conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND application_name = :a AND pid = ANY(:p)"),
                {"d": make_url(db_url).database, "a": APPLICATION_NAME, "p": pids},
            ).scalars().all()
        assert done and all(done)
    finally:
        engine.dispose()


def _lock_row(db_url: str, executor_id: str) -> sa.Row[Any]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT generation, confirmed_at FROM helix_private.executor_locks WHERE executor_id = :e"), {"e": executor_id}).one()
    finally:
        engine.dispose()


def _wait_bodies(k: Kit, proc: subprocess.Popen[str], tools: set[str]) -> None:
    deadline = time.monotonic() + 120
    while not tools <= set(k.bodies()):
        assert time.monotonic() < deadline and proc.poll() is None, "the slow bodies never started"
        time.sleep(0.05)


def _cli(db_url: str, k: Kit, *args: str) -> subprocess.CompletedProcess[str]:
    """``helix-dbos`` as an operator runs it, serving the scenario's agent (so it can take runs over)."""
    env = child_env(SETTINGS_VARS)
    env.update(HELIX_DBOS_APP="tests.scenarios.app:cli_runtime", SCENARIO=k.scenario, SCENARIO_EFFECTS=str(k.workdir / "effects"),
               SCENARIO_DELAY="0.2", COLUMNS="200")
    return run_python_m([sys.executable, "-m", "helix_dbos.cli", *args, "--db", db_url, "--json"], env, timeout=120)  # forked: its start is not tested here


def _json(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(out.stdout[out.stdout.index("{"):])


@pytest.mark.kills
def test_a_worker_cut_off_from_its_lock_re_acquires_it_and_the_takeover_is_refused(pg_url: str, tmp_path: Path) -> None:
    k = Kit(pg_url, tmp_path, scenario="slow_pair")
    # the bodies outlast the cut, the regain and a CLI's whole start: they end when the test releases
    # them after the refused takeover (SCENARIO_DELAY is only their ceiling)
    release = tmp_path / "release"
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "180", "SCENARIO_RELEASE": str(release), "HELIX_DBOS_TAKEOVER_AFTER": "2"})
    try:
        _wait_bodies(k, proc, {"slow_safe", "slow_unsafe"})
        before = _lock_pids(pg_url)
        generation = _lock_row(pg_url, k.executor).generation
        _cut(pg_url, before)
        # the watchdog re-acquires within about one check; on a starved machine a CLI can start
        # sooner than that, and then (rightly) waits out the lease and takes the id: so wait for it
        deadline = time.monotonic() + 60
        while not set(_lock_pids(pg_url)) - set(before):
            assert time.monotonic() < deadline and proc.poll() is None, "the worker never re-acquired its lock"
            time.sleep(0.05)
        refused = _cli(pg_url, k, "recover", "--executor", k.executor)
        assert refused.returncode == 1 and _json(refused)["code"] == "executor_id_in_use", refused.stdout + refused.stderr[-2000:]
        assert _lock_row(pg_url, k.executor).generation == generation  # nobody else held the id in between
        assert not k.lines("body_ends"), "the takeover attempt must have happened while the bodies still ran"
        release.touch()
        stdout, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
    result = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    calls = calls_by_tool(result)
    assert result["status"] == "completed"
    assert {(c["status"], c["attempts"]) for c in calls.values()} == {("ok", 1)}
    assert k.bodies() == {"slow_safe": 1, "slow_unsafe": 1}  # counted by the tools: nothing ran twice
    assert {line["pid"] for line in k.lines("bodies")} == {proc.pid}
    assert k.model_steps() == {0: 1, 1: 1}, "the saved step was asked for again"  # counted by the model
    assert {line["pid"] for line in k.lines("model")} == {proc.pid}  # the refused takeover never asked it
    assert transcript_problems(pg_url, k.session) == []


@pytest.mark.kills
def test_a_worker_whose_id_was_taken_while_it_was_cut_off_exits_before_the_taker_acts(pg_url: str, tmp_path: Path) -> None:
    k = Kit(pg_url, tmp_path, scenario="slow_pair")
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "10", "HELIX_DBOS_TAKEOVER_AFTER": "2"})
    taker = ExecutorLock(pg_url)
    try:
        _wait_bodies(k, proc, {"slow_safe", "slow_unsafe"})
        pids = _lock_pids(pg_url)
        stamp = _lock_row(pg_url, k.executor).confirmed_at
        while _lock_row(pg_url, k.executor).confirmed_at == stamp:  # cut right after a confirmation:
            time.sleep(0.01)  # the worker's next check is ~0.5 s away, so the taker gets there first
        _cut(pg_url, pids)
        deadline = time.monotonic() + 60
        while True:
            try:
                taker.acquire(k.executor)  # returns only once a cut-off holder's lease has run out
                break
            except ExecutorIdInUseError:
                assert time.monotonic() < deadline, "the cut lock was never released"
        acted_at = time.time()
        # On a machine with CPU to spare the cut-off worker has exited by now (its lease is what the
        # taker waited out); a starved one exits as soon as its watchdog runs, and until then it
        # starts nothing (its own clock says its lease ran out) and its late writes are refused.
        gone_first = proc.poll() is not None
        assert proc.wait(timeout=60) == LOCK_LOST_EXIT_CODE, "the cut-off worker must exit for its lost lock"
        err = (k.workdir / next(p.name for p in k.workdir.glob("spawn-*.stderr"))).read_text()
        assert "FATAL" in err and "lost its lock (another process took its executor id)" in err
        if gone_first:
            assert not k.lines("body_ends")  # its bodies died with it
        taker.release()
        out = _cli(pg_url, k, "recover", "--executor", k.executor)
        assert out.returncode == 0, out.stdout + out.stderr[-3000:]
        assert [r["status"] for r in _json(out)["runs"]] == ["completed"]
    finally:
        taker.release()
        proc.kill()
        proc.wait()
    engine = create_sync_engine(pg_url)
    try:
        with engine.connect() as conn:
            calls = dict(conn.execute(sa.text("SELECT tool_name, status FROM helix.calls WHERE session_id = :s"), {"s": k.session}).all())
    finally:
        engine.dispose()
    starts = k.lines("bodies")
    assert k.bodies() == {"slow_safe": 2, "slow_unsafe": 1}  # the unsafe body never twice; the safe one re-ran...
    assert [s["pid"] for s in starts if s["tool"] == "slow_safe"][0] == proc.pid
    assert all(s["t"] > acted_at for s in starts if s["pid"] != proc.pid)  # ...only after the first process was gone
    assert calls == {"slow_safe": "ok", "slow_unsafe": "outcome_unknown"}
    asks = k.lines("model")
    assert k.model_steps() == {0: 1, 1: 1}, "the saved step was asked for again"  # counted by the model
    assert asks[0]["pid"] == proc.pid and asks[1]["pid"] != proc.pid and asks[1]["t"] > acted_at  # step 1: the taker's
    assert transcript_problems(pg_url, k.session) == []


def _old_key(database: str, executor_id: str) -> int:
    """The key main computed from public facts: anyone could take it."""
    return int.from_bytes(hashlib.sha256(f"helix-executor:{database}:{executor_id}".encode()).digest()[:8], "big", signed=True)


@pytest.fixture
def auditor(pg_url: str) -> Iterator[sa.Engine]:
    """A connection pool of the read-only audit role (``helix-dbos audit-role``) on the test database."""
    role = f"helix_audit_{uuid.uuid4().hex[:8]}"
    admin.create_audit_role(pg_url, role, None)
    engine = create_sync_engine(make_url(pg_url).set(username=role).render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()
        owner = create_sync_engine(pg_url, poolclass=sa.pool.NullPool)
        with owner.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
        owner.dispose()
        with _admin(pg_url).begin() as conn:
            conn.execute(sa.text(f"DROP ROLE {role}"))


class Squatter:
    """The audit role at its worst: it takes every advisory lock of the database it can see, and holds it."""

    def __init__(self, engine: sa.Engine, extra_keys: list[int]) -> None:
        self.conn = engine.connect()
        self.taken: set[int] = set()
        self.seen: set[int] = set(extra_keys)  # every key it ever saw held: it tries them again and again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def grab(self) -> None:
        seen = self.conn.execute(sa.text(
            "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND pid <> pg_backend_pid()"
        )).scalars().all()
        self.seen.update(seen)
        for key in self.seen - self.taken:
            if self.conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                self.taken.add(key)
        self.conn.commit()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.grab()

    def __enter__(self) -> Squatter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.conn.close()


def test_the_audit_role_cannot_read_the_keys_nor_block_an_executor(pg_url: str, tmp_path: Path, auditor: sa.Engine) -> None:
    k = Kit(pg_url, tmp_path, scenario="safe")
    with auditor.connect() as conn, pytest.raises(sa.exc.DBAPIError, match="permission denied"):
        conn.execute(sa.text("SELECT lock_key FROM helix_private.executor_locks"))
    with Squatter(auditor, [_old_key(make_url(pg_url).database or "", k.executor)]) as squatter:
        deadline = time.monotonic() + 60
        while len(squatter.taken) < 1:  # main's computable key, taken before the executor ever starts
            assert time.monotonic() < deadline
            time.sleep(0.02)
        first = ExecutorLock(pg_url)
        first.acquire(k.executor)  # main: executor_id_in_use, blocked by the audit role
        assert first.backend.key is not None
        deadline = time.monotonic() + 60
        while first.backend.key not in squatter.seen:  # the squatter sees the key the executor holds (pg_locks is public)
            assert time.monotonic() < deadline, "the squatter never saw the executor's key"
            time.sleep(0.02)
        seen_held = len(squatter.taken)
        first.release()  # the squatter now takes the key it saw held, as soon as it is free
        deadline = time.monotonic() + 60
        while len(squatter.taken) == seen_held:
            assert time.monotonic() < deadline, "the squatter never got the released key"
            time.sleep(0.02)
        out = k.start()  # a real worker with that executor id starts and runs a turn...
        assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
        assert k.bodies() == {"safe_set": 1}
        # ...and another process can still recover that executor (nothing pending: zero runs)
        recovered = _cli(pg_url, k, "recover", "--executor", k.executor)
        assert recovered.returncode == 0 and _json(recovered)["runs"] == [], recovered.stdout + recovered.stderr[-3000:]
        assert len(squatter.taken) >= 3  # it did squat the keys the worker and the recovery used before
    second = ExecutorLock(pg_url)
    try:
        assert second.acquire(k.executor) == k.executor
        with pytest.raises(ExecutorIdInUseError):  # and the lock still excludes a second runtime
            ExecutorLock(pg_url).acquire(k.executor)
    finally:
        second.release()


def _echo_agent() -> hx.Agent:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("echo", {"text": "hi"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    @hx.tool(replay="safe")
    def echo(text: str) -> str:
        """Echo."""
        return text

    return hx.Agent("echoer", FunctionModel(reply), tools=[echo])


@pytest.mark.kills
def test_a_launched_runtime_watches_its_lock_and_takes_it_back(make_runtime: Any, db_url: str) -> None:
    """Both stores, in-process: the watchdog confirms the lock; a lost one (cut connection on
    Postgres, a removed lock file on SQLite) is re-acquired, so the next body runs and a second
    runtime is still refused."""
    rt = make_runtime([_echo_agent()])
    lock = rt._launched.runner.lock  # type: ignore[union-attr]
    assert lock is not None
    # held() also asks for a recent confirmation (it wakes the watchdog when the last one is stale,
    # as after a slow launch on a busy machine): poll for it rather than expect it at once
    deadline = time.monotonic() + 60
    while not lock.held():
        assert time.monotonic() < deadline, "the launched runtime never held its lock"
        time.sleep(0.05)
    lost: list[str] = []
    lock.on_lost = lost.append  # never os._exit the test process
    deadline = time.monotonic() + 60
    while lock.confirmations < 2:
        assert time.monotonic() < deadline, "the watchdog never confirmed the lock"
        time.sleep(0.05)
    if is_sqlite(db_url):
        assert lock.backend.path is not None
        lock.backend.path.unlink()  # another process could now lock a new file of that name
        while not (lock.backend.path.exists() and lock.held()):
            assert time.monotonic() < deadline + 5, "the watchdog never took the lock file back"
            time.sleep(0.05)
    else:
        generation = _lock_row(db_url, rt.executor_id).generation
        before = _lock_pids(db_url)
        _cut(db_url, before)
        while not (set(_lock_pids(db_url)) - set(before) and lock.held()):
            assert time.monotonic() < deadline + 5, "the watchdog never re-acquired the lock"
            time.sleep(0.05)
        assert _lock_row(db_url, rt.executor_id).generation == generation
    with pytest.raises(ExecutorIdInUseError):
        ExecutorLock(db_url).acquire(rt.executor_id)
    assert lock.regains == 1
    assert rt.start("echoer", "go").result(timeout=120).status == "completed"
    assert lost == []


def test_the_backend_is_chosen_once_by_the_database(db_url: str) -> None:
    """A file lock beside a SQLite file, a session advisory lock on Postgres: chosen at construction,
    and the one backend takes, confirms and releases the id."""
    lock = ExecutorLock(db_url, lease=30.0)
    backend = lock.backend
    assert isinstance(backend, FileBackend if is_sqlite(db_url) else AdvisoryBackend)
    executor_id = f"backend-{uuid.uuid4().hex[:8]}"
    try:
        assert lock.acquire(executor_id) == executor_id
        assert lock.backend is backend and backend.confirm(executor_id)
        with pytest.raises(ExecutorIdInUseError):
            ExecutorLock(db_url, lease=30.0).acquire(executor_id)
    finally:
        lock.release()
    assert not backend.confirm(executor_id)
    again = ExecutorLock(db_url, lease=30.0)
    try:
        assert again.acquire(executor_id, wait=False) == executor_id  # a clean release: nobody waits
    finally:
        again.release()
