"""Front ends that only enqueue, workers that run, limits and fairness that hold across all of them.

Real processes on one Postgres database: the front end is ``tests/scenarios/fleet_app.py``'s
``enqueue`` command (``Runtime(mode="client")``), workers are ``helix-dbos worker``. Bodies and
model requests are counted in the fleet app's effect files with the pid that ran them; in-flight
runs and queue times are read from the ledger (``runs.started_at`` / ``ended_at``).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.stats import max_in_window, max_overlap
from tests.support.crashkit import helix_table, query
from tests.support.effects import read_effects
from tests.support.fleet import WorkerPool
from tests.support.procs import child_env, run_python_m
from tests.support.waiting import wait_for

APP = "tests.scenarios.fleet_app:runtime"
LEASE = 3.0


def in_flight(folder: Path, pid: int) -> set[tuple[str, int]]:
    """Bodies ``pid`` started and has not finished: (dispatch id, attempt)."""
    ended = {(e["dispatch_id"], e["attempt"]) for e in read_effects(folder, "body_ends") if e["pid"] == pid}
    return {(b["dispatch_id"], b["attempt"]) for b in read_effects(folder, "bodies") if b["pid"] == pid} - ended


class Fleet(WorkerPool):
    """The processes of one test, on one database, with one effects folder."""

    def __init__(self, db_url: str, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(db_url, workdir, env, app=APP, effects_var="FLEET_EFFECTS", lease=LEASE)

    def enqueue(self, prefix: str, count: int, *, agent: str = "fleet", owner: str | None = None, then_owner: str | None = None) -> dict[str, Any]:
        args = [sys.executable, "-m", "tests.scenarios.fleet_app", "--db", self.db_url, "enqueue", "--agent", agent, "--count", str(count), "--prefix", prefix]
        if owner:
            args += ["--owner", owner]
        if then_owner:
            args += ["--then-owner", then_owner]
        done = run_python_m(args, child_env(extra=self.env), timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(**env: str) -> Fleet:
        f = Fleet(pg_url, tmp_path, env)
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop_all()


def _seconds(ts: Any) -> float:
    return float(ts.timestamp())



@pytest.mark.kills
def test_front_end_runs_nothing_workers_take_over_and_drain(fleet: Callable[..., Fleet]) -> None:
    f = fleet(FLEET_DELAY="3", FLEET_WORKER_CONCURRENCY="2")
    # No worker yet: the front end admits and enqueues; every run waits `queued`, its place visible.
    first = f.enqueue("early", 3, owner="acme")
    assert first["statuses"] == ["queued"] * 3
    assert first["positions"] == [0, 1, 2]
    assert {r["status"] for r in f.runs()} == {"queued"}

    w1 = f.worker("w1")
    w2 = f.worker("w2")
    front = f.enqueue("s", 9, owner="acme")
    # w1 is cut off mid-body (SIGKILL): its runs are taken over when its lease lapses.
    wait_for("a body in flight on w1", lambda: in_flight(f.effects, w1.pid))
    w1.kill()
    w1.wait()
    # w2 is told to stop (SIGTERM) with a body in flight: it dequeues nothing more and finishes what it has.
    wait_for("a body in flight on w2", lambda: in_flight(f.effects, w2.pid))
    t_term = time.time()
    w2.send_signal(signal.SIGTERM)
    assert w2.wait(timeout=90) == 0
    w3 = f.worker("w3")
    runs = wait_for("every run at rest", lambda: f.all_at_rest(12), timeout=240)

    bodies, ends, models = (read_effects(f.effects, k) for k in ("bodies", "body_ends", "model"))
    # the front end never ran a body or a model request
    assert all(e["pid"] not in (front["pid"], first["pid"]) for e in bodies + models)
    # every run completed, and no unsafe body ran twice; a safe body ran again only where w1 was cut
    assert [r["status"] for r in runs] == ["completed"] * 12, runs
    sends = Counter(b["dispatch_id"] for b in bodies if b["tool"] == "send")
    assert max(sends.values()) == 1
    works = Counter(b["dispatch_id"] for b in bodies if b["tool"] == "work")
    rerun = {d for d, n in works.items() if n > 1}
    assert all(n <= 2 for n in works.values())
    assert all(any(b["dispatch_id"] == d and b["pid"] == w1.pid for b in bodies) for d in rerun)
    # drain: every body w2 started, it finished; it dequeued no run after SIGTERM
    w2_bodies = {(b["dispatch_id"], b["attempt"]) for b in bodies if b["pid"] == w2.pid}
    assert w2_bodies <= {(e["dispatch_id"], e["attempt"]) for e in ends if e["pid"] == w2.pid}
    assert all(_seconds(r["started_at"]) <= t_term + 0.5 for r in runs if r["executor_id"] == "w2")
    # a run queued, started on w1 and finished on another worker: the recovery rules answered its
    # cut-off calls. Usually w3 takes w1's runs over; on a busy machine w1's lease can lapse before
    # w2 is told to stop, and then w2 takes them over first (and finishes them in its drain): both
    # are takeover as documented, so either may be the taker.
    finished_by = {row["workflow_uuid"]: row["executor_id"] for row in query(f.db_url, "SELECT workflow_uuid, executor_id FROM dbos.workflow_status")}
    w1_sessions = {b["session_id"] for b in bodies if b["pid"] == w1.pid}
    started_on_w1 = [r for r in runs if r["executor_id"] == "w1" or r["session_id"] in w1_sessions]
    assert {finished_by[r["run_id"]] for r in started_on_w1} <= {"w1", "w2", "w3"}
    cut = [r for r in started_on_w1 if finished_by[r["run_id"]] in ("w2", "w3")]
    assert cut, "no run w1 started was finished by another worker"
    takers = {w2.pid, w3.pid}
    assert rerun and all(any(b["dispatch_id"] == d and b["pid"] in takers and b["attempt"] == 2 for b in bodies) for d in rerun)
    calls = query(f.db_url, f"SELECT run_id, tool_name, status, attempts FROM {helix_table(f.db_url, 'calls')}")
    for run in cut:
        mine = {c["tool_name"]: c for c in calls if c["run_id"] == run["run_id"]}
        # cut mid-body on w1: the safe body ran again on w3 (attempt 2), the unsafe one never did
        assert (mine["work"]["status"], mine["work"]["attempts"]) == ("ok", 2)
        assert (mine["send"]["status"], mine["send"]["attempts"]) == ("outcome_unknown", 1)
    assert w3.poll() is None


def test_limits_hold_across_two_workers(fleet: Callable[..., Fleet]) -> None:
    """max_running=2 and 3 model requests a second for agent ``capped``, 8 sessions, 2 workers with
    room for 4 runs each: the ledger never shows more than 2 in flight, nor 3 grants in a second.

    Which worker dequeues is DBOS's race: a worker whose poll lost a serialization conflict backs
    off, so one worker can win every race and take all 8 (CI saw it once). When the first two runs
    in flight are both one worker's, that worker is told to stop (SIGTERM: it finishes them and
    dequeues nothing more) while the other polls with room for 4: the limit must still hold, and
    the other worker must take the rest."""
    f = fleet(FLEET_DELAY="1", FLEET_WORKER_CONCURRENCY="4", FLEET_MAX_RUNNING="2", FLEET_RATE="3/1")
    w1, w2 = f.worker("w1"), f.worker("w2")
    f.enqueue("c", 8, agent="capped", owner="acme")
    first = wait_for("two runs in flight", lambda: (lambda r: r if len(r) >= 2 else None)([r for r in f.runs() if r["status"] != "queued"]), timeout=240)
    takers = {r["executor_id"] for r in first}
    if len(takers) == 1:
        [only] = takers
        (w1 if only == "w1" else w2).send_signal(signal.SIGTERM)
    runs = wait_for("every run at rest", lambda: f.all_at_rest(8), timeout=240)
    assert [r["status"] for r in runs] == ["completed"] * 8, runs
    spans = [(_seconds(r["started_at"]), _seconds(r["ended_at"])) for r in runs]
    assert max_overlap(spans) == 2  # reached, never exceeded
    assert {r["executor_id"] for r in runs} == {"w1", "w2"}, "both workers took runs"
    grants = [float(g["granted_epoch"]) for g in query(f.db_url, f"SELECT granted_epoch FROM {helix_table(f.db_url, 'rate_grants')} WHERE rate_key = 'agent:capped'")]
    assert len(grants) == 16  # every model request took a grant (2 a run), none was refused for good
    assert max_in_window(grants, 1.0) <= 3
    models = read_effects(f.effects, "model")
    assert {m["pid"] for m in models} == {w1.pid, w2.pid} and len(models) == 16


def test_one_owners_burst_does_not_hold_back_another(fleet: Callable[..., Fleet]) -> None:
    """One worker with room for 2 runs, 1 per owner (owner_share): owner ``burst`` queues 10 runs,
    then ``solo`` one; solo's run starts within one run's time, ahead of burst runs queued before it."""
    f = fleet(FLEET_DELAY="2", FLEET_WORKER_CONCURRENCY="2", FLEET_OWNER_SHARE="1")
    f.worker("w1")
    f.enqueue("b", 10, owner="burst", then_owner="solo")
    runs = wait_for("every run at rest", lambda: f.all_at_rest(11), timeout=240)
    assert [r["status"] for r in runs] == ["completed"] * 11
    mine = {r["session_id"]: r for r in runs}
    s = mine["solo-0"]
    burst = [r for sid, r in mine.items() if sid.startswith("b-")]
    one_run = min(_seconds(r["ended_at"]) - _seconds(r["started_at"]) for r in burst)
    assert _seconds(s["started_at"]) - _seconds(s["created_at"]) <= one_run
    # it went ahead of burst runs queued before it (the burst holds one slot at a time here)
    overtaken = [r for r in burst if r["created_at"] < s["created_at"] and _seconds(r["started_at"]) > _seconds(s["started_at"])]
    assert len(overtaken) >= 3
    # the burst never held both slots: one per owner on this worker
    assert max_overlap([(_seconds(r["started_at"]), _seconds(r["ended_at"])) for r in burst]) == 1


def test_http_front_end_enqueues_and_a_worker_runs(fleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """The HTTP service as a front end (HELIX_DBOS_MODE=client, what ``serve --front-end`` sets):
    POST /sessions answers ``queued`` and GET /sessions/{id} shows its place; a worker runs it."""
    from tests.processes.test_service import start_service

    f = fleet(FLEET_DELAY="0.2")
    service = start_service(f.db_url, tmp_path, "front", extra_env={**f.env, "HELIX_DBOS_MODE": "client", "HELIX_DBOS_APP": APP})
    try:
        with service.client() as http:
            assert http.get("/healthz").json()["executor_id"] == ""
            made = [http.post("/sessions", json={"agent": "fleet", "message": "go", "session_id": f"h-{i}"}) for i in range(2)]
            assert [r.status_code for r in made] == [202, 202]
            assert [r.json()["status"] for r in made] == ["queued", "queued"]
            views = [http.get(f"/sessions/h-{i}").json() for i in range(2)]
            assert [(v["status"], v["queue_position"]) for v in views] == [("queued", 0), ("queued", 1)]
            worker = f.worker("w1")
            wait_for("both runs at rest", lambda: f.all_at_rest(2))
            assert [http.get(f"/sessions/h-{i}").json()["status"] for i in range(2)] == ["completed", "completed"]
        ran = {e["pid"] for e in read_effects(f.effects, "bodies") + read_effects(f.effects, "model")}
        assert ran == {worker.pid}
    finally:
        service.stop()


@pytest.mark.kills
def test_a_second_signal_cuts_a_workers_drain_short(fleet: Callable[..., Fleet]) -> None:
    """``helix-dbos worker``: the first SIGTERM drains (up to --drain-timeout, 30 s here), a second
    ends that wait at once, and the runs still in flight stay PENDING for another worker's takeover.
    The CLI's own signal handler used to take every signal alike, so the second changed nothing."""
    f = fleet(FLEET_DELAY="60")
    w1 = f.worker("w1")
    f.enqueue("slow", 1)
    wait_for("a body in flight on w1", lambda: in_flight(f.effects, w1.pid))
    w1.send_signal(signal.SIGTERM)
    w1.send_signal(signal.SIGINT)  # the impatient operator's Ctrl-C (two SIGTERMs this close would merge into one)
    signalled = time.monotonic()
    assert w1.wait(timeout=25) == 0  # well inside the 30 s drain (and the body's 60 s)
    assert time.monotonic() - signalled < 25
    assert w1.stdout is not None
    drained = json.loads(w1.stdout.read().strip().splitlines()[-1])
    [run] = f.runs()
    assert drained["left_pending"] == [run["run_id"]] and run["status"] == "running"
    assert query(f.db_url, "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = :w", w=run["run_id"]) == [{"status": "PENDING"}]
    f.worker("w2", FLEET_DELAY="1")  # takes the run over once w1's lease lapses
    [done] = wait_for("the run taken over and finished", lambda: f.all_at_rest(1), timeout=120)
    assert done["status"] == "completed"
