"""A late body of a lost run: its external effect may happen, its ledger write is refused."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from helix_dbos.ledger import attempts as attempt_rows
from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import runs as run_rows
from helix_dbos.ledger import sessions as session_rows
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.ledger.migrate import upgrade
from helix_dbos.runtime.process.executor_lock import LOCK_LOST_EXIT_CODE
from tests.support.crashkit import Kit, calls_by_tool


def _seed_call(conn: sa.Connection) -> dict:
    session_rows.insert_session(conn, "s1", "agent")
    run_rows.insert_run(conn, run_id="r1", session_id="s1", seq=1, agent_name="agent", entry="start", max_steps=5)
    call_rows.insert_calls(conn, [dict(dispatch_id="d1", session_id="s1", run_id="r1", checkpoint_id="cp1", step=0, position=0,
                                   tool_call_id="c1", tool_name="t", kind="tool", args={}, replay="safe", status="saved")])
    call = call_rows.get_call(conn, "d1")
    assert call is not None
    return call


@pytest.fixture
def ledger(db_url: str) -> Iterator[sa.Engine]:
    """A migrated ledger, driven directly: these tests play both the lost and the recovering run."""
    if is_sqlite(db_url):
        upgrade(db_url)
    engine = create_sync_engine(db_url)
    yield engine
    engine.dispose()


def test_a_stale_attempt_cannot_write_its_result(ledger: sa.Engine) -> None:
    with ledger.begin() as conn:
        assert attempt_rows.start_attempt(conn, _seed_call(conn), "r1", "lost-executor") == 1
    with ledger.begin() as conn:  # recovery starts attempt 2 while attempt 1 is still out there
        assert attempt_rows.start_attempt(conn, call_rows.get_call(conn, "d1"), "r2", "new-executor") == 2
    with ledger.begin() as conn:
        assert attempt_rows.record_result(conn, "d1", 1, "r1", "ok", result={"from": 1}) is False
        assert attempt_rows.record_result(conn, "d1", 2, "r2", "ok", result={"from": 2}) is True
        assert attempt_rows.record_result(conn, "d1", 2, "r2", "ok", result={"again": 2}) is False  # never twice
    with ledger.connect() as conn:
        row = call_rows.get_call(conn, "d1")
        assert row is not None and (row["status"], row["result"], row["attempts"]) == ("ok", {"from": 2}, 2)
        assert [a["outcome"] for a in attempt_rows.attempts_of(conn, ["d1"])["d1"]] == ["refused", "ok"]


def test_a_body_start_marks_its_call_running_in_the_same_write(ledger: sa.Engine) -> None:
    """The attempt row and the call's half of a body start are one write (Postgres: one CTE
    statement; SQLite: the attempt's INSERT and its ``attempts_mark_call`` trigger): the call is
    running with the attempt's number, and keeps the first body's start time."""
    with ledger.begin() as conn:
        attempt_rows.start_attempt(conn, _seed_call(conn), "r1", "lost-executor")
    time.sleep(0.01)  # the second start's time differs from the first's
    with ledger.begin() as conn:
        attempt_rows.start_attempt(conn, call_rows.get_call(conn, "d1"), "r2", "new-executor")
    with ledger.connect() as conn:
        row = call_rows.get_call(conn, "d1")
        tries = attempt_rows.attempts_of(conn, ["d1"])["d1"]
    assert row is not None and (row["status"], row["attempts"]) == ("running", 2)
    assert [a["attempt"] for a in tries] == [1, 2] and row["started_at"] == tries[0]["started_at"] != tries[1]["started_at"]


def test_a_late_body_after_recovery_paired_it_is_refused(ledger: sa.Engine) -> None:
    with ledger.begin() as conn:
        attempt_rows.start_attempt(conn, _seed_call(conn), "r1", "lost")
    with ledger.begin() as conn:
        call_rows.settle_call(conn, call_rows.get_call(conn, "d1"), "outcome_unknown", run_id="r2", paired_by="recovery", note="n")
    with ledger.begin() as conn:
        assert attempt_rows.record_result(conn, "d1", 1, "r1", "ok", result={"late": True}) is False
    with ledger.connect() as conn:
        row = call_rows.get_call(conn, "d1")
        assert row is not None and row["status"] == "outcome_unknown" and row["result"] is None


@pytest.mark.kills
def test_a_process_cut_off_from_its_store_finishes_late_and_is_refused(pg_url: str, tmp_path: Path) -> None:
    """Postgres only (a SQLite file lock cannot be cut off from a live process; the ledger-level
    tests above prove the fence on both): the server drops a frozen process's connections (its
    executor lock with them), another executor takes the run over, then the frozen body wakes up.
    Awake, the process finds its executor id taken: its lock watchdog exits it loudly (status 75),
    or, if the late body's write gets in first, the ledger refuses it; either way it never lands."""
    db_url = pg_url
    k = Kit(db_url, tmp_path, scenario="slow")
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "4", "HELIX_DBOS_TAKEOVER_AFTER": "2"})
    deadline = time.monotonic() + 120
    while not k.lines("bodies"):
        assert time.monotonic() < deadline and proc.poll() is None, "the slow body never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)
    try:
        name = sa.engine.make_url(db_url).database
        admin = create_sync_engine(db_url.rsplit("/", 1)[0] + "/postgres", poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": name})
        admin.dispose()
        # another executor may act for it only once its lease (2 s here) plus the margin has lapsed
        time.sleep(2 + 1.5 + 1)
        out = k.entry("continue", executor=f"{k.executor}-b", extra_env={"SCENARIO_DELAY": "0.2"})
        assert out.code == 0 and out.result is not None, out.stderr[-3000:]
        call = calls_by_tool(out.result)["slow_safe"]
        assert (call["status"], call["attempts"]) == ("ok", 2)
    finally:
        proc.send_signal(signal.SIGCONT)
    engine = create_sync_engine(db_url)
    try:
        deadline = time.monotonic() + 90  # generous: a loaded CI machine wakes the frozen process slowly
        while True:
            with engine.connect() as conn:
                attempts = attempt_rows.attempts_of(conn, [call["dispatch_id"]])[call["dispatch_id"]]
                row = call_rows.get_call(conn, call["dispatch_id"])
            if attempts[0]["outcome"] == "refused" or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if proc.poll() is not None and attempts[0]["outcome"] in (None, "lost"):  # the lock watchdog was first
            assert proc.returncode == LOCK_LOST_EXIT_CODE
            assert [a["outcome"] for a in attempts] == ["lost", "ok"]  # closed when attempt 2 began
        else:
            assert [a["outcome"] for a in attempts] == ["refused", "ok"]
        assert row is not None and row["result"]["attempt"] == 2  # the late body's result never landed
        assert k.bodies()["slow_safe"] == 2  # both bodies ran: a safe tool's promise is that this is harmless
    finally:
        engine.dispose()
        proc.kill()
        proc.wait()
