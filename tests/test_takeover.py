"""Workers come and go: a gone executor's runs are taken over by a live one, exactly once.

Real processes on one database (a SQLite file several processes share, or a Postgres database):
workers are the scenario app (``tests/scenarios/app.py``) under their own executor ids, with a short
lease (``HELIX_DBOS_TAKEOVER_AFTER``); bodies are counted by the tools in the kit's effect files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.ledger.engine import is_sqlite
from helix_dbos.runtime.executor_lock import LOCK_LOST_EXIT_CODE
from tests.crashkit import Kit, helix_table, query, transcript_problems

LEASE = 3.0
ENV = {"HELIX_DBOS_TAKEOVER_AFTER": str(LEASE), "SCENARIO_DELAY": "3"}
#: What a takeover may take beyond the lease: the watcher's poll (lease / 4), DBOS's re-enqueue and
#: dequeue, the re-run safe body (3 s) and the last model step, on a loaded two-core machine.
BOUND = 20.0


q, tbl = query, helix_table


def serve(kit: Kit, executor: str) -> subprocess.Popen[str]:
    """A live worker under ``executor`` that starts nothing itself: it only serves and takes over."""
    worker = Kit(kit.db_url, kit.workdir, scenario=kit.scenario, executor=executor, session=kit.session)
    proc = worker.spawn("serve", "--seconds", "120", "--until", str(kit.workdir / "stop-servers"), extra_env=ENV)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("{"), f"worker {executor} did not start"
    return proc


def wait_bodies(kit: Kit, proc: subprocess.Popen[str], tools: set[str]) -> None:
    deadline = time.monotonic() + 60
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


def test_a_killed_workers_run_is_finished_by_a_live_one(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b")
    a = kit.spawn("start", extra_env=ENV)
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed = time.monotonic()
        rest = session_at_rest(db_url, kit.session, LEASE + BOUND)
        took = time.monotonic() - killed
        assert rest["run_status"] == "completed", rest
        assert took < LEASE + BOUND
    finally:
        stop_all(kit, b, a)
    assert_recovered_by_the_rules(kit, db_url)
    row = q(db_url, f"SELECT taken_over_by, taken_runs FROM {tbl(db_url, 'executors')} WHERE executor_id = 'worker-a'")[0]
    assert row == {"taken_over_by": "worker-b", "taken_runs": 1}
    history = q(db_url, f"SELECT executor_id, taken_by, why FROM {tbl(db_url, 'executor_takeovers')}")
    assert history == [{"executor_id": "worker-a", "taken_by": "worker-b", "why": "lapsed"}]

    # A gone executor that comes back finds its runs taken: it runs nothing again.
    back = Kit(db_url, tmp_path / "back", scenario="slow_pair", executor="worker-a", session=kit.session)
    proc = back.spawn("serve", "--seconds", "3", extra_env=ENV)
    proc.communicate(timeout=60)
    assert kit.bodies() == {"slow_safe": 2, "slow_unsafe": 1} and not back.bodies()


def test_two_live_workers_race_and_exactly_one_takes_over(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b, c = serve(kit, "worker-b"), serve(kit, "worker-c")
    a = kit.spawn("start", extra_env=ENV)
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        a.send_signal(signal.SIGKILL)
        a.wait()
        assert session_at_rest(db_url, kit.session, LEASE + BOUND)["run_status"] == "completed"
    finally:
        stop_all(kit, b, c, a)
    assert_recovered_by_the_rules(kit, db_url)
    history = q(db_url, f"SELECT executor_id, taken_by FROM {tbl(db_url, 'executor_takeovers')}")
    assert len(history) == 1 and history[0]["executor_id"] == "worker-a" and history[0]["taken_by"] in ("worker-b", "worker-c"), history


def test_a_frozen_worker_past_its_lease_is_taken_over_and_its_late_writes_refused(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b")
    a = kit.spawn("start", extra_env=ENV)
    try:
        wait_bodies(kit, a, {"slow_safe", "slow_unsafe"})
        a.send_signal(signal.SIGSTOP)
        rest = session_at_rest(db_url, kit.session, LEASE + BOUND)
        assert rest["run_status"] == "completed", rest
        a.send_signal(signal.SIGCONT)
        code = a.wait(timeout=60)
        assert code == LOCK_LOST_EXIT_CODE, code  # it found its lease taken and stopped, loudly
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
        stop_all(kit, b, a)
    err = "".join(p.read_text() for p in kit.workdir.glob("spawn-*.stderr"))
    assert "lost its lease" in err or "lost its lock" in err
    c = calls(db_url, kit.session)
    outcomes = q(db_url, f"SELECT attempt, outcome FROM {tbl(db_url, 'attempts')} WHERE dispatch_id = :d ORDER BY attempt", d=c["slow_safe"]["dispatch_id"])
    assert [o["outcome"] for o in outcomes][1] == "ok" and outcomes[0]["outcome"] in ("refused", "lost"), outcomes  # late write refused
    assert c["slow_unsafe"]["status"] == "outcome_unknown"
    assert kit.bodies()["slow_unsafe"] == 1 and kit.bodies()["slow_safe"] == 2  # it ran nothing of the taken runs again
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
            rest = session_at_rest(db_url, k.session, LEASE + 3 * BOUND)
            assert rest["run_status"] == "completed", rest
    finally:
        for k in kits:
            (k.workdir / "stop-servers").touch()
        stop_all(kits[0], *new, *old)
    for k in kits:
        assert k.bodies()["slow_unsafe"] == 1, k.bodies()
        assert k.model_steps()[0] == 1
        assert transcript_problems(db_url, k.session) == []
    taken = q(db_url, f"SELECT executor_id, taken_by FROM {tbl(db_url, 'executor_takeovers')} ORDER BY executor_id")
    assert taken and {r["executor_id"] for r in taken} <= {"old-0", "old-1", "old-2"}, taken
    # nothing is stranded on a replaced executor id (a live old worker may take over a replaced one's
    # runs before it is replaced itself, and its successor then takes them over in turn)
    table = "workflow_status" if is_sqlite(db_url) else "dbos.workflow_status"
    stranded = q(db_url, f"SELECT workflow_uuid, executor_id FROM {table} WHERE status = 'PENDING' AND executor_id LIKE 'old-%'")
    assert stranded == [], stranded


def test_executors_are_listed_for_the_operator(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_pair", executor="worker-a")
    b = serve(kit, "worker-b")
    try:
        import sys

        from tests.crashkit import ROOT

        out = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "executors", "--db", db_url, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = {r["executor_id"]: r for r in json.loads(out.stdout)}
        assert rows["worker-b"]["status"] == "live" and rows["worker-b"]["pending_runs"] == 0
        table = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "executors", "--db", db_url], cwd=ROOT, capture_output=True, text=True, timeout=60,
                               env={**__import__("os").environ, "COLUMNS": "200"})
        assert table.returncode == 0 and "worker-b" in table.stdout and "live" in table.stdout, table.stdout
    finally:
        stop_all(kit, b)
    released = q(db_url, f"SELECT status FROM {tbl(db_url, 'executor_audit')} WHERE executor_id = 'worker-b'")
    assert released == [{"status": "released"}]


pytestmark = pytest.mark.timeout(240)
