"""Workers come and go: a gone executor's runs are taken over by a live one, exactly once.

Real processes on one database (a SQLite file several processes share, or a Postgres database):
workers are the scenario app (``tests/scenarios/app.py``) under their own executor ids, with a short
lease (``HELIX_DBOS_TAKEOVER_AFTER``); bodies are counted by the tools in the kit's effect files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.ledger.engine import is_sqlite
from helix_dbos.runtime.process.executor_lock import LOCK_LOST_EXIT_CODE
from helix_dbos.settings import DEFAULT_RECOVERY_POLL
from tests.support.crashkit import Kit, dbos_table, helix_table, query, transcript_problems
from tests.support.waiting import wait_for

LEASE = 3.0
ENV = {"HELIX_DBOS_TAKEOVER_AFTER": str(LEASE), "SCENARIO_DELAY": "3"}
#: The frozen-worker test's lease: worker-a must still hold its lease when both its bodies have
#: started (the freeze comes after), and on a busy machine (the suite at -n 4 on 2 cores, SQLite's
#: one write lock shared with worker-b) a 3 s lease lapsed before they had: worker-b took the run
#: over from a live worker-a, which exited 75 before the test could freeze it.
FROZEN_LEASE = 8.0
FROZEN_ENV = {**ENV, "HELIX_DBOS_TAKEOVER_AFTER": str(FROZEN_LEASE)}
#: What a takeover may take beyond the lease: the watcher's poll (lease / 4), DBOS's re-enqueue and
#: dequeue, the re-run safe body (3 s) and the last model step, on a loaded two-core machine.
BOUND = 20.0
#: What the handover itself may take beyond the lease, to the crashed call's second attempt: the
#: watcher's poll (lease / 4), DBOS's re-enqueue, and its dequeue within one poll of the internal
#: queue (HELIX_DBOS_RECOVERY_POLL, default 3 s), plus a margin for a loaded two-core machine.
UNDER_WAY_BOUND = DEFAULT_RECOVERY_POLL + 3.0



def _release_frozen(kit: Kit, a: subprocess.Popen[str], b: subprocess.Popen[str], held: Any) -> None:
    """End a frozen-worker test: let go of what held the woken worker up, wake it if it is still
    stopped (so it can be killed), and stop both workers."""
    if held is not None:
        held.close()
    if a.poll() is None:
        a.send_signal(signal.SIGCONT)
        a.kill()
    stop_all(kit, b, a)


q, tbl = query, helix_table


def serve(kit: Kit, executor: str, env: dict[str, str] = ENV) -> subprocess.Popen[str]:
    """A live worker under ``executor`` that starts nothing itself: it only serves and takes over."""
    worker = Kit(kit.db_url, kit.workdir, scenario=kit.scenario, executor=executor, session=kit.session)
    proc = worker.spawn("serve", "--seconds", "120", "--until", str(kit.workdir / "stop-servers"), extra_env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("{"), f"worker {executor} did not start"
    return proc


def wait_bodies(kit: Kit, proc: subprocess.Popen[str], tools: set[str]) -> None:
    deadline = time.monotonic() + 120
    while not tools <= set(kit.bodies()):
        if proc.poll() is not None or time.monotonic() > deadline:
            err = "".join(p.read_text()[-3000:] for p in kit.workdir.glob("spawn-*.stderr"))
            raise AssertionError(f"the bodies never started (exit {proc.poll()}): {err}")
        time.sleep(0.02)


def session_at_rest(db_url: str, session_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        rows = q(db_url, f"SELECT s.status, r.run_id, r.status AS run_status FROM {tbl(db_url, 'sessions')} s "
                         f"JOIN {tbl(db_url, 'runs')} r ON r.run_id = s.current_run_id WHERE s.session_id = :s", s=session_id)
        if rows and rows[0]["run_status"] not in ("running",):
            return rows[0]
        assert time.monotonic() < deadline, f"session {session_id} not at rest after {timeout}s: {rows}"
        time.sleep(0.1)


def calls(db_url: str, session_id: str) -> dict[str, dict[str, Any]]:
    return {r["tool_name"]: r for r in q(db_url, f"SELECT tool_name, status, attempts, dispatch_id FROM {tbl(db_url, 'calls')} WHERE session_id = :s AND step = 0", s=session_id)}


def epoch(value: Any) -> float:
    """A ledger timestamp in epoch seconds (SQLite hands back naive UTC datetimes, or their text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def executors_json(db_url: str) -> list[dict[str, Any]]:
    """``helix-dbos executors --json``, as the operator runs it (in-process, through Typer's runner)."""
    from typer.testing import CliRunner

    from helix_dbos.cli.main import app as cli

    result = CliRunner().invoke(cli, ["executors", "--db", db_url, "--json"])
    assert result.exit_code == 0, (result.stdout, result.exception)
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def frozen(kit: Kit, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until ``proc`` stopped itself at its ``SCENARIO_FREEZE_AT`` point (state T in /proc)."""
    deadline = time.monotonic() + timeout
    while not (kit.lines("frozen") and Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"):
        if proc.poll() is not None or time.monotonic() > deadline:
            err = "".join(p.read_text()[-3000:] for p in kit.workdir.glob("spawn-*.stderr"))
            raise AssertionError(f"the worker never froze (exit {proc.poll()}): {err}")
        time.sleep(0.02)


class Held:
    """What ``hold_watchdog`` holds: ``close()`` lets the watchdog go; ``cut`` says whether the
    frozen process's own watchdog connection had to be cut first (see ``hold_watchdog``)."""

    def __init__(self, handle: Any, cut: bool = False) -> None:
        self.handle, self.cut = handle, cut

    def close(self) -> None:
        self.handle.close()


def _lock_row(db_url: str, executor: str, wait: bool) -> tuple[Any, bool]:
    """A connection to the executor's lock row and whether it got the row's lock (``wait``: wait
    for it; otherwise only take it if no one holds it, and give it back at once)."""
    import sqlalchemy as sa

    from helix_dbos.ledger.engine import create_sync_engine

    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    conn = engine.connect()
    assert conn.execute(sa.text("SELECT count(*) FROM helix_private.executor_locks WHERE executor_id = :e"), {"e": executor}).scalar_one() == 1
    skip = "" if wait else " SKIP LOCKED"
    got = conn.execute(sa.text(f"SELECT 1 FROM helix_private.executor_locks WHERE executor_id = :e FOR UPDATE{skip}"), {"e": executor}).first()
    return conn, got is not None


def stop_between_confirmations(db_url: str, proc: subprocess.Popen[str], executor: str) -> None:
    """SIGSTOP ``proc`` at a moment its watchdog is not inside a confirmation.

    A confirmation is an UPDATE of the executor's lock row and then a COMMIT, two round trips: a
    process stopped between them keeps the row locked for as long as it is stopped, so a test that
    then locks the row itself (``hold_watchdog``) would wait for a process that waits for it. (CI
    saw it: the test's lock timed out after 240 s.) So: stop it, let a statement it had already sent
    reach its backend, and if the row is locked, let it run a moment and stop it again."""
    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        conn, free = _lock_row(db_url, executor, wait=False)
        conn.close()  # never keeps the row: the lock is given back with the connection
        if free:
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"{executor}'s lock row was locked at every stop")


def hold_watchdog(db_url: str, executor: str) -> Held:
    """Hold up ``executor``'s watchdog's first database round trip after it wakes: on Postgres by
    locking its executor-lock row (the confirmation waits behind it), on SQLite by holding the
    file's write lock (the lease renewal waits). ``close()`` the result to let it go.

    On Postgres, a process that stopped itself (``SCENARIO_FREEZE_AT``) may have stopped inside a
    confirmation, its lock row still locked by its idle transaction (``stop_between_confirmations``
    cannot choose the moment of a stop the process makes itself). Then its watchdog's backend is cut,
    as ``idle_in_transaction_session_timeout`` would cut it: the woken watchdog finds its connection
    gone instead of waiting, and ``cut`` is True."""
    if is_sqlite(db_url):
        import sqlite3

        from helix_dbos.ledger.engine import sqlite_path

        lite = sqlite3.connect(str(sqlite_path(db_url)), isolation_level=None, timeout=30)
        lite.execute("BEGIN IMMEDIATE")
        return Held(lite)
    import threading

    deadline = time.monotonic() + 60
    while True:
        conn, free = _lock_row(db_url, executor, wait=False)
        if free:
            return Held(conn)  # kept: the row stays locked until close()
        conn.close()
        # locked: by the stopped process's confirmation, idle in its transaction (or its COMMIT, or
        # its UPDATE, still on the way to its backend: then the row is free or idle in a moment)
        holders = q(db_url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction' "
                            "AND query LIKE 'UPDATE helix_private.executor_locks SET confirmed_at%'")
        if holders:
            break
        assert time.monotonic() < deadline, f"{executor}'s lock row stayed locked, and by no stopped confirmation"
        time.sleep(0.2)
    assert len(holders) == 1, holders  # the stopped process's confirmation, and nobody else's
    took: list[Any] = []
    waiter = threading.Thread(target=lambda: took.append(_lock_row(db_url, executor, wait=True)), daemon=True)
    waiter.start()
    q(db_url, "SELECT pg_terminate_backend(:p)", p=holders[0]["pid"])
    waiter.join(60)
    assert took and took[0][1], "the executor's lock row was not taken after its holder was cut"
    return Held(took[0][0], cut=True)


def wait_attempt_outcomes(db_url: str, session_id: str, outcome: str, timeout: float) -> dict[str, int]:
    """The session's tools with an attempt that ended ``outcome`` (attempt number), once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        rows = q(db_url, f"SELECT c.tool_name, a.attempt FROM {tbl(db_url, 'attempts')} a JOIN {tbl(db_url, 'calls')} c "
                         f"ON c.dispatch_id = a.dispatch_id WHERE c.session_id = :s AND a.outcome = :o", s=session_id, o=outcome)
        found = {r["tool_name"]: r["attempt"] for r in rows}
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def stop_all(kit: Kit, *procs: subprocess.Popen[str]) -> None:
    (kit.workdir / "stop-servers").touch()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def assert_recovered_by_the_rules(kit: Kit, db_url: str) -> None:
    c = calls(db_url, kit.session)
    assert c["slow_safe"]["status"] == "ok" and c["slow_safe"]["attempts"] == 2, c  # safe: ran again
    assert c["slow_unsafe"]["status"] == "outcome_unknown", c  # unsafe: never again, the model is told
    assert kit.bodies() == {"slow_safe": 2, "slow_unsafe": 1}
    assert len({line["dispatch_id"] for line in kit.lines("bodies") if line["tool"] == "slow_safe"}) == 1
    assert kit.model_steps()[0] == 1  # the saved reply was never asked for again
    assert transcript_problems(db_url, kit.session) == []


@pytest.mark.kills
def test_a_killed_workers_run_is_finished_by_a_live_one(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b")
    a = kit.spawn("start", extra_env=ENV)
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed, killed_at = time.monotonic(), time.time()
        rest = session_at_rest(db_url, kit.session, LEASE + BOUND)
        took = time.monotonic() - killed
        assert rest["run_status"] == "completed", rest
        assert took < LEASE + BOUND
    finally:
        stop_all(kit, b, a)
    assert_recovered_by_the_rules(kit, db_url)
    # The small bound itself: the crashed safe call's second attempt was committed (the run under
    # way again, on worker-b) within the lease plus one watcher round and DBOS's re-enqueue.
    second = q(db_url, f"SELECT executor_id, started_at FROM {tbl(db_url, 'attempts')} WHERE dispatch_id = :d AND attempt = 2",
               d=calls(db_url, kit.session)["slow_safe"]["dispatch_id"])[0]
    assert second["executor_id"] == "worker-b", second
    under_way = epoch(second["started_at"]) - killed_at
    assert 0 < under_way < LEASE + UNDER_WAY_BOUND, under_way
    row = q(db_url, f"SELECT taken_over_by, taken_runs FROM {tbl(db_url, 'executors')} WHERE executor_id = 'worker-a'")[0]
    assert row == {"taken_over_by": "worker-b", "taken_runs": 1}
    history = q(db_url, f"SELECT executor_id, taken_by, why FROM {tbl(db_url, 'executor_takeovers')}")
    assert history == [{"executor_id": "worker-a", "taken_by": "worker-b", "why": "lapsed"}]
    # The operator sees the same: `helix-dbos executors --json` says who took over whom.
    listed = {r["executor_id"]: r for r in executors_json(db_url)}
    assert listed["worker-a"]["status"] == "taken_over" and listed["worker-a"]["taken_over_by"] == "worker-b", listed
    assert listed["worker-a"]["taken_runs"] == 1 and listed["worker-a"]["pending_runs"] == 0, listed
    assert listed["worker-b"]["took_over"] == ["worker-a"] and listed["worker-b"]["taken_over_by"] is None, listed

    # A gone executor that comes back finds its runs taken: it runs nothing again.
    back = Kit(db_url, tmp_path / "back", scenario="slow_pair", executor="worker-a", session=kit.session)
    proc = back.spawn("serve", "--seconds", "3", extra_env=ENV)
    proc.communicate(timeout=240)
    assert kit.bodies() == {"slow_safe": 2, "slow_unsafe": 1} and not back.bodies()


@pytest.mark.kills
def test_two_live_workers_race_and_exactly_one_takes_over(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b, c = serve(kit, "worker-b"), serve(kit, "worker-c")
    a = kit.spawn("start", extra_env=ENV)
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        a.send_signal(signal.SIGKILL)
        a.wait()
        assert session_at_rest(db_url, kit.session, LEASE + BOUND)["run_status"] == "completed"
        # Read while both takers are still live: exactly one took worker-a over, and neither took
        # the other (a live worker's lease never lapses under it).
        live = q(db_url, f"SELECT executor_id, taken_by, why FROM {tbl(db_url, 'executor_takeovers')}")
    finally:
        stop_all(kit, b, c, a)
    assert_recovered_by_the_rules(kit, db_url)
    assert len(live) == 1 and live[0]["executor_id"] == "worker-a" and live[0]["taken_by"] in ("worker-b", "worker-c"), live
    assert live[0]["why"] == "lapsed", live
    # Stopping them afterwards may add one row: the first to stop releases its lease, and the other,
    # still live for a moment, records taking that released lease over (it holds no runs).
    history = q(db_url, f"SELECT executor_id, taken_by, why FROM {tbl(db_url, 'executor_takeovers')}")
    later = [h for h in history if h != live[0]]
    assert len(history) == len(later) + 1, history
    assert all(h["why"] == "released" and {h["executor_id"], h["taken_by"]} == {"worker-b", "worker-c"} for h in later), history


def test_a_frozen_worker_past_its_lease_is_taken_over_and_its_late_writes_refused(db_url: str, tmp_path: Path) -> None:
    """Frozen mid-body past its lease, then resumed: its bodies end and their result writes are
    refused by the attempt fence (the first to write; a refusal ends the run's workflow in that
    process, so its sibling may never write); then it finds its lease taken and exits 75, running
    nothing more.

    On Postgres the late write is made certain: while the test holds worker-a's executor-lock row,
    the woken watchdog cannot confirm the lock (nor so renew, nor exit), so the woken bodies' writes
    are tried first. (On SQLite the watchdog's check is a file lock no test can hold up without also
    holding up the write: the attempts end ``refused`` if a write came first, ``lost`` if the
    watchdog did; both paths are asserted apart below.)"""
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b", FROZEN_ENV)
    a = kit.spawn("start", extra_env=FROZEN_ENV)
    held: Any = None
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        if is_sqlite(db_url):
            a.send_signal(signal.SIGSTOP)
        else:  # so the test can lock worker-a's lock row below (hold_watchdog)
            stop_between_confirmations(db_url, a, "worker-a")
        rest = session_at_rest(db_url, kit.session, FROZEN_LEASE + BOUND)
        assert rest["run_status"] == "completed", rest
        if not is_sqlite(db_url):
            held = hold_watchdog(db_url, "worker-a")
            assert not held.cut  # stopped between confirmations: its watchdog's connection is whole
        a.send_signal(signal.SIGCONT)
        if held is not None:
            late = wait_attempt_outcomes(db_url, kit.session, "refused", timeout=120)
            assert late, "no woken body's write was tried"  # the first woken body wrote, and was refused
            held.close()
            held = None
        code = a.wait(timeout=60)
        assert code == LOCK_LOST_EXIT_CODE, code  # it found its lease taken and stopped, loudly
    finally:
        _release_frozen(kit, a, b, held)
    err = "".join(p.read_text() for p in kit.workdir.glob("spawn-*.stderr"))
    assert "lost its lease" in err or "lost its lock" in err
    c = calls(db_url, kit.session)
    outcomes = q(db_url, f"SELECT attempt, outcome, executor_id FROM {tbl(db_url, 'attempts')} WHERE dispatch_id = :d ORDER BY attempt", d=c["slow_safe"]["dispatch_id"])
    assert [(o["attempt"], o["outcome"], o["executor_id"]) for o in outcomes][1] == (2, "ok", "worker-b"), outcomes
    firsts = {r["tool_name"]: r["outcome"] for r in q(db_url, f"SELECT c.tool_name, a.outcome FROM {tbl(db_url, 'attempts')} a JOIN {tbl(db_url, 'calls')} c "
                                                            f"ON c.dispatch_id = a.dispatch_id WHERE c.session_id = :s AND a.attempt = 1", s=kit.session)}
    ended = {line["tool"] for line in kit.lines("body_ends") if line["pid"] == a.pid}
    # A woken body's write is refused; a sibling whose write was never tried (the first refusal ends
    # the run's workflow in that process, or the watchdog exits it) stays lost, never written.
    assert set(firsts.values()) <= {"refused", "lost"} and {k for k, v in firsts.items() if v == "refused"} <= ended, (firsts, ended)
    if not is_sqlite(db_url):
        assert "refused" in firsts.values(), firsts  # the late write was tried, and refused
    elif "refused" not in firsts.values():  # the watchdog exited the process before any write was tried
        assert "lost its lease" in err, err[-2000:]
    assert c["slow_safe"]["status"] == "ok" and c["slow_unsafe"]["status"] == "outcome_unknown", c  # the late writes changed nothing
    assert kit.bodies()["slow_unsafe"] == 1 and kit.bodies()["slow_safe"] == 2  # it ran nothing of the taken runs again
    assert transcript_problems(db_url, kit.session) == []


def test_a_worker_whose_lease_lapsed_starts_no_body_when_it_wakes(db_url: str, tmp_path: Path) -> None:
    """The lapsed-lease rule: a process frozen (SIGSTOP) after its call's attempt was recorded and
    before the body starts is taken over; woken, it starts no body (its own clock says its lease ran
    out, so the body waits for the watchdog, which finds the lease taken) and exits 75.

    The freeze is the process's own (``SCENARIO_FREEZE_AT=before_body``), so it is exactly between
    the attempt gate and the body's last check; and the woken watchdog's first database round trip
    is held up by the test for a while, so only the lease's own clock stands between the woken
    process and a second body (without that rule the body starts at once)."""
    kit = Kit(db_url, tmp_path, scenario="unsafe", executor="worker-a")
    b = serve(kit, "worker-b")
    a = kit.spawn("start", extra_env={**ENV, "SCENARIO_FREEZE_AT": "before_body:unsafe_send"})
    held: Any = None
    cut = False
    try:
        frozen(kit, a)
        rest = session_at_rest(db_url, kit.session, LEASE + BOUND)  # worker-b took the run over
        assert rest["run_status"] == "completed", rest
        held = hold_watchdog(db_url, "worker-a")
        cut = held.cut
        a.send_signal(signal.SIGCONT)
        time.sleep(1.5)  # a body the woken process started would have written its line by now
        assert not kit.bodies(), kit.lines("bodies")
        held.close()
        held = None
        code = a.wait(timeout=60)
        assert code == LOCK_LOST_EXIT_CODE, code
    finally:
        _release_frozen(kit, a, b, held)
    assert not kit.bodies(), kit.lines("bodies")  # neither the woken worker-a nor worker-b (unsafe: never again) ran it
    c = calls(db_url, kit.session)["unsafe_send"]
    assert c["status"] == "outcome_unknown", c
    attempts = q(db_url, f"SELECT attempt, outcome, executor_id FROM {tbl(db_url, 'attempts')} WHERE dispatch_id = :d", d=c["dispatch_id"])
    assert attempts == [{"attempt": 1, "outcome": "lost", "executor_id": "worker-a"}], attempts
    err = "".join(p.read_text() for p in kit.workdir.glob("spawn-*.stderr"))
    # a stopped confirmation cut by hold_watchdog: the woken watchdog found its lock gone, not taken
    assert "lost its lease" in err or (cut and "lost its lock" in err), err[-2000:]
    assert kit.model_steps() == {0: 1, 1: 1}  # worker-b continued from the saved reply
    assert transcript_problems(db_url, kit.session) == []


def test_a_rolling_deploy_replaces_every_worker_and_every_session_completes(db_url: str, tmp_path: Path) -> None:
    """Three workers, each running a session, are replaced one by one by workers with new executor
    ids (SIGTERM, as a deploy sends): every session completes and no unsafe body runs twice."""
    kits = [Kit(db_url, tmp_path / f"s{i}", scenario="slow_pair", executor=f"old-{i}") for i in range(3)]
    slow = {**ENV, "SCENARIO_DELAY": "20"}  # bodies outlast the replacement of all three workers
    old = [k.spawn("start", extra_env=slow) for k in kits]
    new: list[subprocess.Popen[str]] = []
    try:
        for i, k in enumerate(kits):
            wait_bodies(k, old[i], {"slow_safe", "slow_unsafe"})
            new.append(serve(k, f"new-{i}"))
            old[i].send_signal(signal.SIGTERM)
            old[i].wait(timeout=60)
        for k in kits:
            # BOUND allows for a 3 s body; these last 20 s, and a taken-over safe one runs again in
            # full (a CI-like run at load ~6 needed more than 63 s once)
            rest = session_at_rest(db_url, k.session, LEASE + 3 * BOUND + 60)
            assert rest["run_status"] == "completed", rest
    finally:
        for k in kits:
            (k.workdir / "stop-servers").touch()
        stop_all(kits[0], *new, *old)
    for k in kits:
        assert k.bodies()["slow_unsafe"] == 1, k.bodies()
        assert k.model_steps()[0] == 1
        assert transcript_problems(db_url, k.session) == []
    every = q(db_url, f"SELECT executor_id, taken_by, why FROM {tbl(db_url, 'executor_takeovers')} ORDER BY executor_id")
    # stopping the new workers at the end may add rows: the first to stop releases its lease and one
    # still live records taking it over; every other row is an old worker's
    taken = [r for r in every if not (r["why"] == "released" and r["executor_id"].startswith("new-"))]
    assert taken and {r["executor_id"] for r in taken} <= {"old-0", "old-1", "old-2"}, every
    # nothing is stranded on a replaced executor id (a live old worker may take over a replaced one's
    # runs before it is replaced itself, and its successor then takes them over in turn)
    table = dbos_table(db_url, "workflow_status")
    stranded = q(db_url, f"SELECT workflow_uuid, executor_id FROM {table} WHERE status = 'PENDING' AND executor_id LIKE 'old-%'")
    assert stranded == [], stranded


def test_executors_are_listed_for_the_operator(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b")
    try:
        import sys

        from tests.support.procs import run_python_m  # forked: the CLI's start is not what is tested

        out = run_python_m([sys.executable, "-m", "helix_dbos.cli", "executors", "--db", db_url, "--json"], dict(os.environ), timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = {r["executor_id"]: r for r in json.loads(out.stdout)}
        assert rows["worker-b"]["status"] == "live" and rows["worker-b"]["pending_runs"] == 0
        table = run_python_m([sys.executable, "-m", "helix_dbos.cli", "executors", "--db", db_url], {**os.environ, "COLUMNS": "200"}, timeout=60)
        assert table.returncode == 0 and "worker-b" in table.stdout and "live" in table.stdout, table.stdout
    finally:
        stop_all(kit, b)
    released = q(db_url, f"SELECT status FROM {tbl(db_url, 'executor_audit')} WHERE executor_id = 'worker-b'")
    assert released == [{"status": "released"}]


@pytest.mark.kills
def test_a_killed_workers_remote_child_and_companion_turn_are_taken_over(db_url: str, tmp_path: Path) -> None:
    """The children of runs are workflows of the executor that dequeued them: worker-a serves a
    remote child (its unsafe ``dig`` in flight) and a companion turn (its safe ``ponder`` in flight)
    for two parents that serve no queue, and is SIGKILLed while worker-b is alive. Its lease lapses,
    one live process takes worker-a over, and the live ones finish both children by the recovery rules:
    the unsafe body never again, the safe one once more under its dispatch id; both parents complete."""
    from helix_dbos.ledger import tables as t
    from tests.support.familykit import Family

    fam = Family(db_url, tmp_path)
    env = {"HELIX_DBOS_TAKEOVER_AFTER": str(LEASE)}
    fam.hold("tides")  # the remote child's dig holds
    fam.hold("one")  # the companion turn's ponder holds
    a = fam.spawn("serve", executor="worker-a", env=env)
    b: subprocess.Popen[str] | None = None
    parents: list[subprocess.Popen[str]] = []
    sessions = {"remote_boss": uuid.uuid4().hex, "pal_boss": uuid.uuid4().hex}
    try:
        assert a.stdout is not None and json.loads(a.stdout.readline())["ready"]
        for agent, message in (("remote_boss", "tides"), ("pal_boss", "one")):
            parents.append(fam.spawn("start", "--agent", agent, "--message", message, "--session", sessions[agent],
                                     executor=f"parent-{agent}", serve=False, env=env))
        wait_for("both children's bodies on worker-a", lambda: {x["tool"] for x in fam.bodies()} >= {"dig", "ponder"})
        assert {x["pid"] for x in fam.bodies()} == {a.pid}
        b = fam.spawn("serve", executor="worker-b", env=env)
        assert b.stdout is not None and json.loads(b.stdout.readline())["ready"]
        a.kill()
        a.wait(timeout=30)
        killed = time.monotonic()
        fam.release("tides")
        fam.release("one")
        said = [p.communicate(timeout=LEASE + BOUND + 30) for p in parents]
        assert all(out.strip() for out, _ in said), [(p.returncode, err[-3000:]) for p, (out, err) in zip(parents, said, strict=True) if not out.strip()]
        results = [json.loads(out.strip().splitlines()[-1]) for out, _ in said]
        assert time.monotonic() - killed < LEASE + BOUND
    finally:
        (fam.effects / "stop_worker").touch()
        for p in [a, *([b] if b else []), *parents]:
            if p.poll() is None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    remote, pal = results
    assert remote["status"] == "completed" and pal["status"] == "completed", results
    (child_call,) = remote["calls"]
    assert child_call["status"] == "ok" and child_call["result"] == {"topic": "tides", "digs": 1}, child_call
    assert "pal turn 1: one" in pal["output"], pal
    bodies = fam.bodies()
    assert [x["pid"] for x in bodies if x["tool"] == "dig"] == [a.pid]  # unsafe: never again after the kill
    (dig,) = fam.rows(t.calls, t.calls.c.session_id == child_call["child_session_id"], t.calls.c.tool_name == "dig")
    assert dig["status"] == "outcome_unknown", dig  # the child's model was told instead
    ponders = [x for x in bodies if x["tool"] == "ponder"]
    live = {b.pid, *(p.pid for p in parents)}  # who runs a taken-over workflow is DBOS's choice: any live process
    assert ponders[0]["pid"] == a.pid and len(ponders) == 2 and ponders[1]["pid"] in live, (ponders, live)
    assert len({x["dispatch_id"] for x in ponders}) == 1 and [x["attempt"] for x in ponders] == [1, 2], ponders  # safe: once more, same dispatch id
    for agent in ("researcher", "pal", "remote_boss", "pal_boss"):
        counts = fam.model_requests(agent)
        assert counts and max(counts.values()) == 1, f"{agent} was asked twice for one step: {counts}"
    every = fam.rows(t.executor_takeovers)
    # a parent that ended its run and exited released its lease, and a live process may record taking
    # that over (on a loaded machine it happens before the test reads): only worker-a's lapsed
    taken = [r for r in every if r["why"] != "released"]
    assert all(r["executor_id"].startswith("parent-") for r in every if r["why"] == "released"), every
    assert [(r["executor_id"], r["why"]) for r in taken] == [("worker-a", "lapsed")], every
    assert taken[0]["taken_by"] in ("worker-b", "parent-remote_boss", "parent-pal_boss"), taken
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == sessions["pal_boss"])
    # what worker-a held: the remote child's run, the companion's workflow and the turn it was running
    assert sorted(taken[0]["workflow_ids"]) == sorted([child_call["dispatch_id"], comp["workflow_id"], pal["calls"][0]["dispatch_id"]]), (taken, comp)
    fam.close()


pytestmark = pytest.mark.timeout(240)
