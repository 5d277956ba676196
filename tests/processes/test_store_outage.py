"""A database outage during a run: ridden out inside ``store_retry_window``, typed ``store_unavailable`` past it.

The outage is real: the runtime (a child process, ``tests/scenarios/app.py``) reaches Postgres through
``tests/tcpproxy.py``, which the test cuts (every connection reset, new ones refused) while a safe and an
unsafe body are in flight, then restores. The shared server itself is never touched. Body starts and
model requests are counted by the tools and the model in fsynced files, outside the runtime.
"""

from __future__ import annotations

import json
import logging
import sqlite3
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
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.ledger import attempts as attempt_rows
from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import runs as run_rows
from helix_dbos.ledger import sessions as session_rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.ledger.statuses import CALL_SETTLED
from helix_dbos.runtime.floor import gate
from helix_dbos.runtime.floor.durable import Tries
from helix_dbos.runtime.floor.records import DoneGate, RecordOutcome, RunGate
from helix_dbos.runtime.flow import bodies
from tests.support.crashkit import Kit, transcript_problems
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    p = TcpProxy.for_url(pg_url)
    yield p
    p.close()


def attempts(db_url: str, session_id: str) -> list[dict[str, Any]]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            stmt = sa.select(t.attempts, t.calls.c.tool_name).join(t.calls, t.calls.c.dispatch_id == t.attempts.c.dispatch_id)
            return [dict(r) for r in conn.execute(stmt.where(t.calls.c.session_id == session_id)).mappings()]
    finally:
        engine.dispose()


def run_through_outage(k: Kit, proxy: TcpProxy, *, window: float, cut: float, stall: bool = False) -> dict[str, Any]:
    """Start the run through the proxy, cut the database (``stall``: make it stop answering) once
    both bodies have started, restore it ``cut`` seconds later, and return the run's result as the
    same process reports it."""
    proc = k.spawn("start", extra_env={"HELIX_DBOS_STORE_RETRY_WINDOW": str(window), "SCENARIO_DELAY": "1.5"})
    deadline = time.monotonic() + 120
    while len({b["tool"] for b in k.lines("bodies")}) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the outage"
    with proxy.stalled(cut) if stall else proxy.outage(cut):
        pass
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, (proc.returncode, _stderr(k))
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines, _stderr(k)
    return lines[-1]


def _stderr(k: Kit) -> str:
    return "\n".join(p.read_text()[-3000:] for p in k.workdir.glob("spawn-*.stderr"))


def _env(rt: hx.Runtime) -> Any:
    """The ``Env`` ``rt``'s launch hands its runs (its runner's registry's)."""
    assert rt._launched is not None and rt._launched.runner is not None
    return rt._launched.runner.registry.env


def test_an_outage_inside_the_window_is_ridden_out(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    k = Kit(proxy.url(pg_url), tmp_path, scenario="outage")
    result = run_through_outage(k, proxy, window=30, cut=6)
    assert proxy.dropped > 0 and proxy.refused > 0  # the runtime really met the outage: dropped, then refused
    print(_stderr(k))

    assert result["status"] == "completed", result
    calls = {c["tool"]: c for c in result["calls"]}
    assert calls["slow_safe"]["status"] == "ok" and calls["slow_unsafe"]["status"] == "ok", calls
    assert calls["slow_safe"]["attempts"] == 1 and calls["slow_unsafe"]["attempts"] == 1, calls
    assert k.bodies() == {"slow_safe": 1, "slow_unsafe": 1}  # the unsafe body ran once, the safe one too
    assert k.model_steps()[0] == 1  # the saved step was never asked for again
    rows = attempts(pg_url, k.session)
    assert len(rows) == 2 and all(r["ended_at"] is not None and r["outcome"] == "ok" for r in rows), rows
    assert transcript_problems(pg_url, k.session) == []


def test_an_outage_past_the_window_fails_typed_and_retry_recovers(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    k = Kit(proxy.url(pg_url), tmp_path, scenario="outage")
    result = run_through_outage(k, proxy, window=2, cut=8)

    assert result["status"] == "failed" and result["error_code"] == "store_unavailable", result
    direct = Kit(pg_url, tmp_path, scenario="outage", executor=k.executor, session=k.session)
    engine = create_sync_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        run = conn.execute(sa.select(t.runs).where(t.runs.c.run_id == result["run_id"])).mappings().one()
    engine.dispose()
    assert "store_retry_window" in run["error"] and "e3q8" not in run["error"], run["error"]
    assert all(c["status"] in CALL_SETTLED for c in result["calls"]), result["calls"]  # no call unanswered
    rows = attempts(pg_url, k.session)
    assert rows and all(r["ended_at"] is not None and r["outcome"] is not None for r in rows), rows  # none left open
    assert k.bodies() == {"slow_safe": 1, "slow_unsafe": 1}

    # Recoverable: retry() runs the safe body again by the rules; the unsafe one is never re-run.
    again = direct.entry("retry", extra_env={"SCENARIO_DELAY": "0"})
    assert again.code == 0 and again.result is not None, again.stderr[-3000:]
    assert again.result["status"] == "completed", again.result
    assert k.bodies()["slow_unsafe"] == 1 and k.bodies()["slow_safe"] == 2
    calls = {c["tool"]: c for c in again.result["calls"]}
    assert calls["slow_safe"]["status"] == "ok" and calls["slow_unsafe"]["status"] == "outcome_unknown", calls
    assert all(r["ended_at"] is not None and r["outcome"] is not None for r in attempts(pg_url, k.session))
    assert k.model_steps()[0] == 1
    assert transcript_problems(pg_url, k.session) == []


def test_a_stall_inside_the_window_is_ridden_out(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    """The database stops answering (connections kept open, bytes held, no error anywhere) for less
    than the window: the run just waits, and nothing is run again or asked again."""
    k = Kit(proxy.url(pg_url), tmp_path, scenario="outage")
    started = time.monotonic()
    result = run_through_outage(k, proxy, window=30, cut=5, stall=True)
    assert time.monotonic() - started >= 5 and proxy.dropped == proxy.refused == 0  # a stall, not a cut
    assert result["status"] == "completed", result
    calls = {c["tool"]: c for c in result["calls"]}
    assert {(c["status"], c["attempts"]) for c in calls.values()} == {("ok", 1)}, calls
    assert k.bodies() == {"slow_safe": 1, "slow_unsafe": 1}
    assert k.model_steps() == {0: 1, 1: 1}
    rows = attempts(pg_url, k.session)
    assert len(rows) == 2 and all(r["ended_at"] is not None and r["outcome"] == "ok" for r in rows), rows
    assert transcript_problems(pg_url, k.session) == []


def test_a_stall_past_the_window_fails_typed_with_no_attempt_left_open(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    """The database stops answering for longer than the window: the result writes that wait on it
    give up at the window's end (a stalled connection raises nothing by itself; the runtime bounds
    its waits), the run fails ``store_unavailable`` once the store answers again, and every attempt
    row has its end and outcome."""
    k = Kit(proxy.url(pg_url), tmp_path, scenario="outage")
    result = run_through_outage(k, proxy, window=2, cut=9, stall=True)
    assert proxy.dropped == proxy.refused == 0  # nothing was cut: only silence
    assert result["status"] == "failed" and result["error_code"] == "store_unavailable", result
    engine = create_sync_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        error = conn.execute(sa.select(t.runs.c.error).where(t.runs.c.run_id == result["run_id"])).scalar_one()
    engine.dispose()
    assert "store_retry_window" in error and "e3q8" not in error, error
    assert all(c["status"] in CALL_SETTLED for c in result["calls"]), result["calls"]
    rows = attempts(pg_url, k.session)
    assert len(rows) == 2 and all(r["ended_at"] is not None and r["outcome"] is not None for r in rows), rows
    assert k.bodies() == {"slow_safe": 1, "slow_unsafe": 1}
    assert k.model_steps() == {0: 1}  # failed: the model was not asked again


# --- the attempt gate across a lost commit acknowledgement (both databases) ----------------------


def _seed(conn: sa.Connection, tool: str, **call: Any) -> None:
    session_rows.insert_session(conn, "s1", "gatekeeper")
    session = session_rows.get_session(conn, "s1")
    assert session is not None and session_rows.claim_session(conn, session, "r1")  # r1 is the current run (the fence)
    run_rows.insert_run(conn, run_id="r1", session_id="s1", seq=1, agent_name="gatekeeper", entry="start", max_steps=5)
    call_rows.insert_calls(conn, [dict(dispatch_id="d1", session_id="s1", run_id="r1", checkpoint_id="cp1", step=0, position=0,
                                   tool_call_id="c1", tool_name=tool, kind="tool", args={}, replay="unsafe", status="saved", **call)])


def test_a_gate_retried_after_its_commit_finds_its_own_attempt(make_runtime: Any) -> None:
    """The gate's first try committed but its acknowledgement was lost; ``plain_tx`` runs it again.

    The retry is played for real: the same gate execution (same token) in a second transaction after
    the first one committed. Without the token it would see a running unsafe call with an attempt
    and no result (a crashed body) and pair it ``outcome_unknown`` before the body ever started.
    """
    async def send(ctx: hx.ToolContext) -> str:
        """Send it (unsafe)."""
        return "sent"

    rt = make_runtime([hx.Agent("gatekeeper", TestModel(), tools=[hx.tool(name="send")(send)])])
    with rt.engine.begin() as conn:
        _seed(conn, "send")
    with rt.engine.begin() as conn:
        first = gate.gate(conn, _env(rt), "r1", "d1", "token-1")
    with rt.engine.begin() as conn:
        again = gate.gate(conn, _env(rt), "r1", "d1", "token-1")
    assert isinstance(first, RunGate) and isinstance(again, RunGate) and first.action == again.action == "run" and again.attempt == first.attempt == 1
    with rt.engine.begin() as conn:
        call = call_rows.get_call(conn, "d1")
        assert call is not None and (call["status"], call["attempts"]) == ("running", 1)
        assert len(attempt_rows.attempts_of(conn, ["d1"])["d1"]) == 1
        written = gate.record_once(conn, "r1", "d1", 1, "ok", "sent", None)
    with rt.engine.begin() as conn:  # the result write's own retry after its commit: still written, once
        assert gate.record_once(conn, "r1", "d1", 1, "ok", "sent", None) == written == RecordOutcome("ok", written=True)
        (attempt,) = attempt_rows.attempts_of(conn, ["d1"])["d1"]
        assert attempt["outcome"] == "ok" and attempt["ended_at"] is not None


def test_a_retried_gate_hands_the_body_the_calls_approval(make_runtime: Any) -> None:
    """A gate retried after its commit answers what the first try answered, the approval included.

    A body run after a lost commit acknowledgement sees ``ToolContext.approved`` as the first try
    would have, for a call a human approved: the retried gate's answer is built in the one place
    the first one's is (``gate._goes_ahead``)."""
    async def send(ctx: hx.ToolContext) -> str:
        """Send it (unsafe, approved by a human)."""
        return "sent"

    rt = make_runtime([hx.Agent("gatekeeper", TestModel(), tools=[hx.tool(name="send", requires_approval=True)(send)])])
    with rt.engine.begin() as conn:
        _seed(conn, "send", requires_approval=True, approved=True)
    with rt.engine.begin() as conn:
        first = gate.gate(conn, _env(rt), "r1", "d1", "token-1")
    with rt.engine.begin() as conn:
        again = gate.gate(conn, _env(rt), "r1", "d1", "token-1")
    assert isinstance(first, RunGate) and first.action == "run" and first.approved is True
    assert again == first


def test_a_gate_retried_without_its_token_would_take_itself_for_a_crash(make_runtime: Any) -> None:
    """The hazard the token removes, shown on the ledger: the tokenless gate run twice pairs the call."""
    async def send(ctx: hx.ToolContext) -> str:
        """Send it (unsafe)."""
        return "sent"

    rt = make_runtime([hx.Agent("gatekeeper", TestModel(), tools=[hx.tool(name="send")(send)])])
    with rt.engine.begin() as conn:
        _seed(conn, "send")
    with rt.engine.begin() as conn:
        assert gate.gate(conn, _env(rt), "r1", "d1").action == "run"
    with rt.engine.begin() as conn:
        assert gate.gate(conn, _env(rt), "r1", "d1") == DoneGate("outcome_unknown")
        (attempt,) = attempt_rows.attempts_of(conn, ["d1"])["d1"]
        assert attempt["outcome"] == "lost" and attempt["ended_at"] is not None  # paired: its attempt is closed


def test_the_bodys_gate_counts_its_tries_across_a_lost_acknowledgement(make_runtime: Any) -> None:
    """The body's gate is handed one ``Tries`` for all of its ``plain_tx`` tries: the second try,
    after a first that committed, knows it is one and finds its own attempt. A gate that took its
    second try for a first (a fresh count) would pair its own call as a crashed body's."""
    async def send(ctx: hx.ToolContext) -> str:
        """Send it (unsafe)."""
        return "sent"

    rt = make_runtime([hx.Agent("gatekeeper", TestModel(), tools=[hx.tool(name="send")(send)])])
    with rt.engine.begin() as conn:
        _seed(conn, "send")
    tries = Tries()
    with rt.engine.begin() as conn:
        first = bodies._gate(conn, _env(rt), "r1", "d1", "token-1", tries, None)
    with rt.engine.begin() as conn:
        again = bodies._gate(conn, _env(rt), "r1", "d1", "token-1", tries, None)
    assert tries.count == 2 and again == first and isinstance(first.answer, RunGate) and first.answer.action == "run"
    with rt.engine.begin() as conn:
        assert bodies._gate(conn, _env(rt), "r1", "d1", "token-1", Tries(), None).answer == DoneGate("outcome_unknown")


# --- SQLite: a writer holding the file's lock past busy_timeout -----------------------------------


def _sqlite_runtime(tmp_path: Path, hold: float, window: float) -> tuple[hx.Runtime, list[str]]:
    url = f"sqlite:///{tmp_path / 'busy.sqlite'}"
    locked = threading.Event()
    seen: list[str] = []

    def hold_the_lock() -> None:
        con = sqlite3.connect(tmp_path / "busy.sqlite", isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(hold)
        con.execute("COMMIT")
        con.close()

    async def take_lock(ctx: hx.ToolContext) -> str:
        """Another writer takes the database's write lock while this body finishes (safe)."""
        import asyncio

        seen.append("body")
        threading.Thread(target=hold_the_lock, daemon=True).start()
        await asyncio.to_thread(locked.wait, 10)
        return "done"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append("model")
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("take_lock", {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("finished")])

    tool = hx.tool(replay="safe", name="take_lock")(take_lock)
    rt = hx.Runtime([hx.Agent("busy", FunctionModel(model), tools=[tool])], database_url=url,
                    executor_id=f"busy-{uuid.uuid4().hex[:8]}", store_retry_window=window).launch()
    engine = rt._launched.runner.tx_engine  # type: ignore[union-attr]  # the ledger transactions' pool: a short busy_timeout, so the lock outlasts it
    sa.event.listen(engine, "connect", lambda dbapi, _rec: dbapi.execute("PRAGMA busy_timeout=200"))
    engine.dispose()
    return rt, seen


def test_sqlite_busy_past_busy_timeout_is_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt, seen = _sqlite_runtime(tmp_path, hold=1.5, window=30)
    try:
        with caplog.at_level(logging.WARNING, logger="helix_dbos"):
            result = rt.start("busy", "go").result(timeout=60)
        assert result.status == "completed", result
        (call,) = rt.session(result.session_id).calls
        assert call.status == "ok" and len(call.attempts) == 1 and seen == ["model", "body", "model"]
        assert any("database unavailable while running _record (database is locked)" in r.getMessage() for r in caplog.records)
        assert all(a["ended_at"] is not None and a["outcome"] == "ok" for a in call.attempts)
    finally:
        rt.shutdown()


def test_sqlite_busy_past_the_window_fails_store_unavailable(tmp_path: Path) -> None:
    rt, seen = _sqlite_runtime(tmp_path, hold=2.5, window=0.5)
    try:
        result = rt.start("busy", "go").result(timeout=60)
        assert result.status == "failed" and result.error_code == "store_unavailable", result
        assert result.error is not None and "store_retry_window" in result.error and "database is locked" in result.error
        (call,) = rt.session(result.session_id).calls
        assert call.status == "outcome_unknown" and seen == ["model", "body"]
        assert all(a["ended_at"] is not None and a["outcome"] == "lost" for a in call.attempts)
    finally:
        rt.shutdown()


def test_the_window_is_configured_and_bad_values_are_refused_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    from helix_dbos.errors import ConfigurationError
    from helix_dbos.runtime.process.config import resolve_store_retry_window
    from helix_dbos.settings import from_environ

    monkeypatch.delenv("HELIX_DBOS_STORE_RETRY_WINDOW", raising=False)
    assert resolve_store_retry_window(None, from_environ()) == 60.0
    monkeypatch.setenv("HELIX_DBOS_STORE_RETRY_WINDOW", "7.5")
    assert resolve_store_retry_window(None, from_environ()) == 7.5 and resolve_store_retry_window(2, from_environ()) == 2.0  # the argument wins
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("HELIX_DBOS_STORE_RETRY_WINDOW", bad)
        with pytest.raises(ConfigurationError):
            resolve_store_retry_window(None, from_environ())
    with pytest.raises(ConfigurationError):
        hx.Runtime([], store_retry_window=-3)


def _server_now(pg_url: str) -> Any:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT clock_timestamp()")).scalar()
    finally:
        engine.dispose()


def _lock_taken_again(pg_url: str, executor: str, application: str, proc: Any, after: Any) -> None:
    """Wait until a lock connection opened since ``after`` (just before the outage) holds the
    executor's advisory key: the watchdog noticed the loss and re-took it, however long a busy
    machine makes that take."""
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool)
    try:
        deadline = time.monotonic() + 90
        while True:
            with engine.connect() as conn:
                held = conn.execute(sa.text(
                    "SELECT 1 FROM helix_private.executor_locks e JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted "
                    "AND l.objsubid = 1 AND l.classid::bigint = (e.lock_key >> 32) & 4294967295 AND l.objid::bigint = e.lock_key & 4294967295 "
                    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE e.executor_id = :e AND a.application_name = :app AND a.backend_start >= :after"
                ), {"e": executor, "app": application, "after": after}).first()
            if held:
                return
            assert proc.poll() is None and time.monotonic() < deadline, "the watchdog never took the lock again"
            time.sleep(0.1)
    finally:
        engine.dispose()


def test_the_executor_id_lock_is_taken_again_after_an_outage(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    """The outage ended the session holding the executor id's advisory lock, and the server dropped
    the lock with it; the live process takes it again, so a second process on its id is still refused."""
    from helix_dbos.runtime.process.executor_lock import APPLICATION_NAME

    k = Kit(proxy.url(pg_url), tmp_path, scenario="slow")
    # the body outlasts the outage, the watchdog's regain and the twin's whole start: it ends when the
    # test releases it after the twin was refused (SCENARIO_DELAY is only its ceiling)
    release = tmp_path / "release"
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "180", "SCENARIO_RELEASE": str(release), "HELIX_DBOS_STORE_RETRY_WINDOW": "30"})
    deadline = time.monotonic() + 120
    while not k.lines("bodies") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, _stderr(k)
    before_outage = _server_now(pg_url)
    with proxy.outage(2):
        pass
    assert proxy.dropped > 0
    _lock_taken_again(pg_url, k.executor, APPLICATION_NAME, proc, before_outage)
    twin = Kit(pg_url, tmp_path / "twin", scenario="slow", executor=k.executor)
    out = twin.run("start", timeout=60)
    assert out.code != 0 and "ExecutorIdInUseError" in out.stderr, (out.code, out.stderr[-2000:], proc.poll())
    assert proc.poll() is None  # refused while the first process still held its id
    release.touch()
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, _stderr(k)
    result = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")][-1]
    assert result["status"] == "completed" and k.bodies() == {"slow_safe": 1}, result
