"""A wait for a pooled connection is not an outage.

A worker holds more runs in flight than its ``tx_pool`` has connections: runs queue for a
connection while the database answers every one of them. That wait used to count toward
``store_retry_window`` (the try's bound on the server started before the checkout, and a checkout
that timed out opened the window), so at scale runs failed ``store_unavailable`` with the database
up (80 of 1,000 in the bench). Now the bound starts at the checkout and a pool timeout opens no
window; a real outage still fails typed after the window.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from helix_dbos.errors import StoreUnavailableError
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.runtime.floor.store_retry import Backoff, retrying_sync
from tests.support.crashkit import helix_table, query
from tests.support.procs import child_env, run_module, spawn_module
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    p = TcpProxy.for_url(pg_url)
    yield p
    p.close()


def _hold(engine: sa.Engine, seconds: float) -> threading.Thread:
    """Check out the pool's only connection and keep it busy for ``seconds``."""
    held = threading.Event()

    def hold() -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(60)
    return thread


def _select_one(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT 1")).scalar_one())


@pytest.mark.parametrize("pool_timeout", [30.0, 0.5], ids=["waits-in-pool", "pool-times-out"])
def test_a_wait_for_a_pooled_connection_longer_than_the_window_is_no_outage(pg_url: str, pool_timeout: float) -> None:
    """A try that waited 2.5 s for the pool's only connection (window 0.2 s, a try's wait on the
    server bounded to 1 s) gets its answer; with a 0.5 s ``pool_timeout`` the checkout times out
    several times first, and none of those opens the window."""
    engine = create_sync_engine(pg_url, pool_size=1, max_overflow=0, pool_timeout=pool_timeout)
    try:
        holder = _hold(engine, 2.5)
        started = time.monotonic()
        assert retrying_sync("reading one row", lambda: _select_one(engine), 0.2) == 1
        assert time.monotonic() - started >= 2.0  # it did wait for the connection
        holder.join(60)
    finally:
        engine.dispose()


def test_a_pool_wait_after_an_outage_began_neither_ends_nor_extends_the_window() -> None:
    """Once a busy lock or a dropped connection opened the window, a checkout that timed out (every
    connection held by tries the database still answers) is tried again at once even past the
    window's end; the next error from the database itself past the end is ``store_unavailable``."""
    outage = sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))
    pool_wait = sa.exc.TimeoutError("QueuePool limit of size 5 overflow 0 reached, connection timed out, timeout 30.00")
    backoff = Backoff("admitting a start entry", window=1)
    assert backoff.next_delay(outage) > 0
    opened = backoff.deadline
    backoff.deadline = time.monotonic() - 0.01  # the window is spent
    assert backoff.next_delay(pool_wait) == 0.0  # still waiting for a connection
    assert backoff.deadline is not None and backoff.deadline < time.monotonic() and opened is not None
    with pytest.raises(StoreUnavailableError):
        backoff.next_delay(outage)


def test_a_refused_connection_still_fails_after_the_window(pg_url: str, proxy: TcpProxy) -> None:
    """The same small pool through a cut database: the window counts, typed."""
    engine = create_sync_engine(proxy.url(pg_url), pool_size=1, max_overflow=0, pool_timeout=0.5)
    try:
        assert _select_one(engine) == 1
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            retrying_sync("reading one row", lambda: _select_one(engine), 1.0)
        assert time.monotonic() - started < 60
    finally:
        proxy.restore()
        engine.dispose()


def test_many_runs_on_one_pooled_connection_all_complete(pg_url: str, tmp_path: Path) -> None:
    """A real worker process: 30 runs on ``tx_pool=(1, 0)`` with a 1 s window, the only connection
    held for 16 s in turns of 2 s while they go (each body takes 0.5 s): runs wait longer than the window for it, and
    every one completes."""
    env = child_env(extra={"HELIX_DBOS_STORE_RETRY_WINDOW": "1"})
    args = ["--db", pg_url, "--effects", str(tmp_path / "effects"), "--runs", "30", "--hold", "16", "--body", "0.5"]
    out = run_module("tests.scenarios.pool_wait_app", args, env, timeout=400)
    assert out.code == 0 and out.result is not None, out.stderr[-4000:]
    elapsed = out.result.pop("_elapsed")
    assert float(elapsed["run_id"]) >= 15  # the runs did wait for the held connection
    assert len(out.result) == 30
    assert {(r["status"], r["error_code"]) for r in out.result.values()} == {("completed", None)}, out.result
    runs = query(pg_url, f"SELECT status, count(*) AS n FROM {helix_table(pg_url, 'runs')} GROUP BY status")
    assert [(r["status"], r["n"]) for r in runs] == [("completed", 30)]


def test_an_outage_on_a_small_pool_still_fails_typed_after_the_window(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> None:
    """The same worker shape through a proxy cut for 8 s while a body runs (window 1 s): the run fails
    ``store_unavailable`` once the database is back, as on any pool."""
    folder = tmp_path / "effects"
    env = child_env(extra={"HELIX_DBOS_STORE_RETRY_WINDOW": "1"})
    args = ["--db", proxy.url(pg_url), "--effects", str(folder), "--runs", "1", "--body", "3"]
    proc = spawn_module("tests.scenarios.pool_wait_app", args, env, stderr=(tmp_path / "stderr").open("w"))
    try:
        deadline = time.monotonic() + 120
        while not (folder / "bodies.jsonl").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the outage"
        with proxy.outage(8):
            pass
        stdout, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:  # only when an assertion above failed: end it as a worker is ended
            proc.terminate()
            proc.wait(60)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-4000:]
    result = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    result.pop("_elapsed")
    [(_, run)] = result.items()
    assert (run["status"], run["error_code"]) == ("failed", "store_unavailable"), run
    assert proxy.dropped + proxy.refused > 0
