"""Entries into a fleet (docs/scaling.md): a priority on every entry that enqueues, child runs
counted against their agent's ``max_running``, a stop that withdraws a run no worker took yet, and
live output read through a front end.

In-process runtimes check what each entry writes (DBOS's own ``workflow_status`` rows, read with
plain SQL); real worker processes (``helix-dbos worker --app tests.scenarios.entries_app:runtime``)
check what the fleet does, counted from the ledger's ``runs.started_at`` / ``ended_at``.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from bench.stats import max_overlap
from helix_dbos.errors import ConfigurationError, NothingToResumeError, ValidationError
from helix_dbos.runtime.process import dbos_private
from tests.support.crashkit import dbos_table, helix_table, query
from tests.support.fleet import WorkerPool
from tests.support.waiting import wait_for

APP = "tests.scenarios.entries_app:runtime"


def workflow_rows(db_url: str) -> dict[str, dict[str, Any]]:
    rows = query(db_url, f"SELECT workflow_uuid, status, queue_name, priority FROM {dbos_table(db_url, 'workflow_status')}")
    return {r["workflow_uuid"]: r for r in rows}


def seconds(ts: Any) -> float:
    """A ledger timestamp in epoch seconds (SQLite hands them back as ISO text, in UTC)."""
    from datetime import datetime

    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts).replace(tzinfo=UTC)
    return float(ts.timestamp())


# --- a priority on every entry ------------------------------------------------------------------------


def _gate_agent() -> hx.Agent:
    """Asks for an approval on every user message, answers once the approval's result is in."""

    @hx.tool(requires_approval=True, replay="safe")
    def ask(topic: str) -> str:
        return f"asked about {topic}"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts) and not any(isinstance(p, UserPromptPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("ask", {"topic": "x"}, tool_call_id=f"ask-{len(messages)}")])

    return hx.Agent("gate", FunctionModel(reply), tools=[ask])


def test_every_entry_enqueues_with_its_priority(make_runtime: Any, db_url: str) -> None:
    """An agent with ``max_running`` has its entries enqueued even in one process: each entry's
    DBOS row carries the priority it was given (start, approval wake, turn, retry, resume)."""
    rt = make_runtime([_gate_agent()], limits={"gate": hx.AgentLimits(max_running=3)})
    first = rt.start("gate", "hello", priority=7)
    suspended = first.result(timeout=60)
    assert suspended.status == "suspended_client_tool"
    sid = first.session_id
    pending = suspended.pending[0].dispatch_id
    woke = rt.approve(sid, pending, priority=6)
    assert woke.run is not None and woke.run.result(timeout=60).status == "completed"
    turn = rt.start("gate", "again", session_id=sid, priority=5)
    assert turn.result(timeout=60).status == "suspended_client_tool"
    assert rt.stop(sid).status == "interrupted"
    retried = rt.retry(sid, priority=4)
    retried.result(timeout=60)
    resumed = rt.resume(sid, mode="with_message", message="redirect", priority=3)
    resumed.result(timeout=60)
    unprioritised = rt.start("gate", "plain")
    unprioritised.result(timeout=60)
    rows = workflow_rows(db_url)
    got = [rows[h.run_id]["priority"] for h in (first, woke.run, turn, retried, resumed, unprioritised)]
    assert got == [7, 6, 5, 4, 3, 0]  # no priority is DBOS's 0
    assert {rows[h.run_id]["queue_name"] for h in (first, turn)} == {"helix_entries.gate"}


@pytest.mark.parametrize("bad", [0, -1, 2**31, 1.5, "5", True])
def test_a_priority_out_of_range_is_refused_and_changes_nothing(make_runtime: Any, db_url: str, bad: Any) -> None:
    rt = make_runtime([_gate_agent()], limits={"gate": hx.AgentLimits(max_running=3)})
    handle = rt.start("gate", "hello")
    suspended = handle.result(timeout=60)
    assert suspended.status == "suspended_client_tool"
    sid = handle.session_id
    before = (query(db_url, f"SELECT COUNT(*) AS n FROM {helix_table(db_url, 'runs')}"), len(workflow_rows(db_url)))
    pending = suspended.pending[0].dispatch_id
    for entry in (
        lambda: rt.start("gate", "x", priority=bad),
        lambda: rt.start("gate", "x", session_id=sid, priority=bad),
        lambda: rt.approve(sid, pending, priority=bad),
        lambda: rt.submit_tool_result(sid, pending, result=1, priority=bad),
        lambda: rt.retry(sid, priority=bad),
        lambda: rt.resume(sid, mode="with_message", message="m", priority=bad),
    ):
        with pytest.raises(ValidationError, match="priority must be an int from 1 to 2147483647"):
            entry()
    assert (query(db_url, f"SELECT COUNT(*) AS n FROM {helix_table(db_url, 'runs')}"), len(workflow_rows(db_url))) == before
    assert rt.get_run(handle.run_id).pending[0].dispatch_id == pending  # the approval is still awaited


def test_http_entries_take_a_priority_and_refuse_a_bad_one(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    rt = hx.Runtime([_gate_agent()], database_url=db_url, limits={"gate": hx.AgentLimits(max_running=3)})
    with TestClient(create_app(rt), base_url="http://localhost") as http:
        for bad in (0, 2**31, "5", 1.5, True, None):
            if bad is None:
                continue
            refused = http.post("/sessions", json={"agent": "gate", "message": "hi", "session_id": "h-bad", "priority": bad})
            assert refused.status_code == 400 and refused.json()["code"] == "validation_error", refused.text
        assert http.get("/sessions/h-bad").status_code == 404  # nothing was written
        made = http.post("/sessions", json={"agent": "gate", "message": "hi", "session_id": "h-1", "priority": 9}, params={"wait": 60})
        assert made.status_code == 202 and made.json()["status"] == "suspended_client_tool"
        dispatch = made.json()["pending"][0]["dispatch_id"]
        assert http.post(f"/sessions/h-1/calls/{dispatch}/approval", json={"approved": True, "priority": 0}).status_code == 400
        woke = http.post(f"/sessions/h-1/calls/{dispatch}/approval", json={"approved": True, "priority": 8}, params={"wait": 60}).json()
        turn = http.post("/sessions/h-1/turns", json={"message": "again", "priority": 7}, params={"wait": 60}).json()
        assert http.post("/sessions/h-1/stop", json={}).status_code == 202
        retry = http.post("/sessions/h-1/retry", json={"priority": 6}, params={"wait": 60}).json()
        resume = http.post("/sessions/h-1/resume", json={"mode": "with_message", "message": "go", "priority": 5}, params={"wait": 60}).json()
        assert http.post("/sessions/h-1/resume", json={"mode": "with_message", "message": "go", "priority": -3}).status_code == 400
    rows = workflow_rows(db_url)
    assert [rows[r["run_id"]]["priority"] for r in (made.json(), woke["run"], turn, retry, resume)] == [9, 8, 7, 6, 5]


# --- limits: a child run counts against its agent's max_running -----------------------------------------


def test_a_limited_agent_on_a_delegation_cycle_is_refused() -> None:
    """A parent holds its slot while it waits for its child: a limited agent that delegates to itself
    (directly, or through another agent) could wait for a slot only its waiting parents hold."""
    echo = hx.Agent("echo", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])))
    loop = hx.Agent("loop", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])), sub_agents=[hx.remote_agent(echo)])
    echo.sub_agents.append(hx.companion_agent(loop))  # loop -> echo -> loop
    with pytest.raises(ConfigurationError, match=r"max_running on 'loop' could deadlock: it delegates to itself \(loop -> echo -> loop\)"):
        hx.Runtime([loop], limits={"loop": hx.AgentLimits(max_running=2)})
    hx.Runtime([loop])  # no limit: nothing to wait for
    hx.Runtime([loop], limits={"loop": hx.AgentLimits(model_requests=(5, 1.0))})  # a rate holds no slot


# --- which queues a worker polls ----------------------------------------------------------------------------


def _polled_queues() -> set[str]:
    """The queues DBOS polls in this process: its queue manager names each one's thread ``queue-worker-<queue>``."""
    return {t.name.removeprefix("queue-worker-") for t in threading.enumerate() if t.name.startswith("queue-worker-")}


@pytest.mark.parametrize(("serve_queue", "parent", "serves"), [(None, False, False), (None, True, True), (True, False, True), (False, True, False)])
def test_a_worker_serves_the_childrens_queue_when_it_can_have_children(make_runtime: Any, db_url: str, serve_queue: bool | None, parent: bool, serves: bool) -> None:
    """An idle poll of the children's queue is a claim 10 times a second per worker (docs/benchmarks.md,
    "Scale, 2 workers"). A worker follows a single process's rule: it serves the queue when one of
    its agents has a remote or companion sub-agent (only such a run enqueues there, and the worker
    running it defines it), or when told True (a pool defining only the child agents); never when
    told False. Its entry queue is served in every case."""
    agent = hx.Agent("solo", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("done")])))
    agents = [agent]
    if parent:
        agents.append(hx.Agent("boss", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("done")])), sub_agents=[hx.remote_agent(agent)]))
    rt = make_runtime(agents, mode="worker", serve_queue=serve_queue)
    # DBOS's manager starts a queue's thread when it lists its row; helix_runs is registered first
    polled = wait_for("the entry queue's poller", lambda: (q := _polled_queues()) >= {"helix_entries"} and q)
    if serves:
        assert wait_for("the children's queue's poller", lambda: "helix_runs" in _polled_queues())
    else:
        assert "helix_runs" not in polled
        assert rt.start("solo", "hi").result(timeout=120).output == "done"  # its entries still run here
        assert "helix_runs" not in _polled_queues()


# --- a stop of a queued run withdraws it -----------------------------------------------------------------


def test_a_stop_withdraws_a_run_no_worker_took(make_runtime: Any, db_url: str) -> None:
    """max_running=1 and a slow first run: the runs behind it wait ``queued``. A stop takes such a run
    off its queue in the stop's own transaction: it ends at once (interrupt: ``interrupted``; abort:
    ``failed``/``run_stopped``), never runs, holds no slot, and its session takes the next entry."""
    import asyncio

    asked: list[str] = []
    release = threading.Event()

    @hx.tool(replay="safe")
    async def slow(key: str) -> str:
        while not release.is_set():
            await asyncio.sleep(0.02)
        return key

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart))
        asked.append(str(prompt))
        if isinstance(messages[-1], ModelRequest) and any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("slow", {"key": "k"}, tool_call_id=f"s-{len(messages)}")])

    rt = make_runtime([hx.Agent("one", FunctionModel(reply), tools=[slow])], limits={"one": hx.AgentLimits(max_running=1)})
    a = rt.start("one", "a", session_id="a")
    wait_for("a running", lambda: rt.session("a").status == "running")
    b = rt.start("one", "b", session_id="b")
    c = rt.start("one", "c", session_id="c")
    assert [rt.session(s).status for s in ("b", "c")] == ["queued", "queued"]
    stopped_b = rt.stop("b", kind="interrupt", requested_by="tester")
    stopped_c = rt.stop("c", kind="abort")
    assert (stopped_b.stopped, stopped_b.status, stopped_c.stopped, stopped_c.status) == (True, "interrupted", True, "failed")
    rows = workflow_rows(db_url)
    assert [(rows[h.run_id]["status"], rows[h.run_id]["queue_name"]) for h in (b, c)] == [("CANCELLED", None), ("CANCELLED", None)]
    assert (rt.get_run(c.run_id).error_code, rt.get_run(b.run_id).status) == ("run_stopped", "interrupted")
    assert rt.stop("a").status == "stop_requested"  # a run a worker took stops at its next boundary, as before
    release.set()
    assert a.result(timeout=60).status == "interrupted"
    # the withdrawn runs never ran: no model request for b or c; each session takes its next entry
    assert "b" not in asked and "c" not in asked
    runs = {r["run_id"]: r for r in query(db_url, f"SELECT run_id, started_at FROM {helix_table(db_url, 'runs')}")}
    assert runs[b.run_id]["started_at"] is None and runs[c.run_id]["started_at"] is None
    assert rt.start("one", "b again", session_id="b").result(timeout=60).status == "completed"
    # a withdrawn run applied nothing: c's session has no run to retry (its message never went in)
    with pytest.raises(NothingToResumeError):
        rt.retry("c")
    assert rt.start("one", "c again", session_id="c").result(timeout=60).status == "completed"
    kinds = [r["type"] for r in query(db_url, f"SELECT type FROM {helix_table(db_url, 'events')} WHERE session_id = 'b' ORDER BY seq")]
    assert kinds.count("run_withdrawn") == 1 and kinds.index("stop_requested") < kinds.index("run_withdrawn")


# --- real worker processes ------------------------------------------------------------------------------


class Workers(WorkerPool):
    """Worker processes of one test on one database, and a front end (``mode="client"``) in the test
    process: it launches no DBOS, so nothing runs here."""

    def __init__(self, db_url: str, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(db_url, workdir, env, app=APP, effects_var="ENTRIES_EFFECTS")
        self.front: hx.Runtime | None = None

    def front_end(self, launch: bool = True) -> hx.Runtime:
        """The front end; ``launch=False`` leaves launching to its owner (the service's lifespan)."""
        import os

        from tests.scenarios import entries_app

        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # the same agents and limits as the workers
        try:
            self.front = entries_app.runtime("client", self.db_url)
            if launch:
                self.front.launch()
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        return self.front

    def stop_all(self) -> None:
        if self.front is not None:
            self.front.shutdown()
        super().stop_all()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Workers]]:
    made: list[Workers] = []

    def make(**env: str) -> Workers:
        w = Workers(db_url, tmp_path, env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()


def test_a_high_priority_entry_goes_ahead_of_a_queued_backlog(workers: Callable[..., Workers]) -> None:
    """One worker with room for one run; a backlog of five at priority 100 behind the run it holds;
    then one entry at priority 1: the worker takes it next, ahead of every run that was waiting."""
    f = workers(ENTRIES_DELAY="1", ENTRIES_WORKER_CONCURRENCY="1")
    front = f.front_end()
    w = f.worker("w1")
    backlog = [front.start("line", f"lo-{i}", session_id=f"lo-{i}", priority=100) for i in range(5)]
    wait_for("the first backlog run running", lambda: any(r["status"] == "running" for r in f.runs()))
    urgent = front.start("line", "hi", session_id="hi", priority=1)
    runs = {r["run_id"]: r for r in wait_for("every run at rest", lambda: f.all_at_rest(6), timeout=240)}
    assert {r["status"] for r in runs.values()} == {"completed"}
    hi = runs[urgent.run_id]
    waiting = [runs[h.run_id] for h in backlog if seconds(runs[h.run_id]["started_at"]) > seconds(hi["created_at"])]
    assert len(waiting) >= 3, "the backlog was still queued when the urgent entry came"
    # nothing that was waiting started before it: the worker's next dequeue was the urgent run
    assert all(seconds(r["started_at"]) > seconds(hi["started_at"]) for r in waiting)
    assert max_overlap([(seconds(r["started_at"]), seconds(r["ended_at"])) for r in runs.values()]) == 1
    assert {m["pid"] for m in f.effects_of("model")} == {w.pid}


def test_child_runs_count_against_their_agents_limit(workers: Callable[..., Workers]) -> None:
    """``boss`` (max_running 2) delegates in one step to the remote sub-agent ``helper`` and the
    companion ``pal`` (max_running 1 each); 4 bosses on 2 workers with room for 4 runs each. A limit
    counts every run of its agent in flight, entries and children alike: the ledger never shows two
    helpers, two pal turns or three bosses at once, and the parents waiting on their children under
    a saturated limit all finish (no deadlock: a child's agent holds slots only its own runs hold).

    On SQLite one worker: DBOS 3.4 counts a queue's runs there outside the transaction that claims
    the next ones (pysqlite begins it at the claim's UPDATE), so two processes on one file can both
    admit up to the limit (docs/scaling.md, "Where it stops")."""
    f = workers(ENTRIES_DELAY="1", ENTRIES_WORKER_CONCURRENCY="4", ENTRIES_LIMITS="boss=2,helper=1,pal=1")
    front = f.front_end()
    f.worker("w1")
    if not f.db_url.startswith("sqlite"):
        f.worker("w2")
    for i in range(4):
        front.start("boss", f"boss-{i}", session_id=f"boss-{i}", owner="acme")
    runs = wait_for("every run at rest", lambda: f.all_at_rest(12), timeout=300)
    assert [r["status"] for r in runs] == ["completed"] * 12, runs
    by_agent: dict[str, list[tuple[float, float]]] = {}
    for r in runs:
        by_agent.setdefault(r["agent_name"], []).append((seconds(r["started_at"]), seconds(r["ended_at"])))
    assert {a: len(v) for a, v in by_agent.items()} == {"boss": 4, "helper": 4, "pal": 4}
    assert {a: max_overlap(v) for a, v in by_agent.items()} == {"boss": 2, "helper": 1, "pal": 1}, sorted(
        (r["agent_name"], r["session_id"], seconds(r["created_at"]), seconds(r["started_at"]), seconds(r["ended_at"]), r["executor_id"]) for r in runs)
    # the children waited on their agents' queues, partitioned by the parent session's owner
    rows = query(f.db_url, f"SELECT workflow_uuid, queue_name, queue_partition_key FROM {dbos_table(f.db_url, 'workflow_status')}")
    queue_of = {r["workflow_uuid"]: (r["queue_name"], r["queue_partition_key"]) for r in rows}
    children = [r for r in runs if r["agent_name"] != "boss"]
    assert {queue_of[r["run_id"]] for r in children} == {("helix_entries.helper", "acme"), ("helix_entries.pal", "acme")}


def test_a_front_end_serves_live_output_from_a_worker(workers: Callable[..., Workers], db_url: str) -> None:
    """The worker writes the deltas; the front end (no DBOS launched) reads them from the database,
    over ``GET /sessions/{id}/live`` and ``Runtime.live``."""
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    f = workers(ENTRIES_DELAY="1", HELIX_DBOS_LIVE_OUTPUT="1")
    front = f.front_end(launch=False)
    events: list[tuple[str, Any]] = []
    with TestClient(create_app(front), base_url="http://localhost") as http:  # its lifespan launches the front end
        started = http.post("/sessions", json={"agent": "line", "message": "say", "session_id": "live-1"})
        assert started.status_code == 202 and started.json()["status"] == "queued"
        run_id = started.json()["run_id"]

        def follow() -> None:
            with http.stream("GET", "/sessions/live-1/live", params={"timeout": 120}) as response:
                assert response.status_code == 200
                kind = None
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        events.append((str(kind), json.loads(line[6:])))

        reader = threading.Thread(target=follow)
        reader.start()
        w = f.worker("w1")
        reader.join(150)
        wait_for("the run at rest", lambda: f.all_at_rest(1))
        # the Python API of the front end reads the same stream (the run has ended: all of it)
        again = list(front.live(run_id, timeout=120))
        assert front.is_front_end and dbos_private.configured_dbos() is None  # no DBOS in this process: the client read it
    seen = [v for k, v in events if k == "live"]
    assert events[0] == ("run", {"run_id": run_id, "best_effort": True}) and events[-1][0] == "end"
    text = "".join(d["text"] for v in seen if v["type"] == "deltas" for d in v["deltas"] if d["kind"] == "text")
    assert text == "Streamed from the worker."
    assert [d["tool_name"] for v in seen if v["type"] == "deltas" for d in v["deltas"] if d["kind"] == "tool_call"] == ["work"]
    assert [(v["step"], v["type"]) for v in again] == [(v["step"], v["type"]) for v in seen]
    assert {m["pid"] for m in f.effects_of("model")} == {w.pid}


def test_cli_entries_take_a_priority(monkeypatch: Any, db_url: str, tmp_path: Path) -> None:
    """``helix-dbos start --priority``: the run of an agent with ``max_running`` is enqueued with it
    (and run by the CLI's own process); a priority out of DBOS's range is refused before any launch."""
    from typer.testing import CliRunner

    from helix_dbos.cli.main import app as cli

    monkeypatch.setenv("HELIX_DBOS_APP", APP)
    monkeypatch.setenv("ENTRIES_LIMITS", "line=2")
    monkeypatch.setenv("ENTRIES_DELAY", "0.1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    monkeypatch.delenv("HELIX_DBOS_EXECUTOR_ID", raising=False)
    import logging

    for handler in logging.getLogger("dbos").handlers:  # an earlier CliRunner's stream may be closed
        if handler.name == "__dbos_console_log_handler__" and isinstance(handler, logging.StreamHandler):
            handler.stream = sys.__stderr__
    refused = CliRunner().invoke(cli, ["start", "line", "hi", "--session", "cli-0", "--priority", "0", "--db", db_url, "--json"])
    assert refused.exit_code != 0 and "priority must be an int from 1 to 2147483647" in refused.output
    ran = CliRunner().invoke(cli, ["start", "line", "hi", "--session", "cli-1", "--priority", "42", "--db", db_url, "--json"])
    assert ran.exit_code == 0, ran.output
    out = json.loads(ran.stdout)
    assert out["status"] == "completed"
    row = workflow_rows(db_url)[out["run_id"]]
    assert (row["queue_name"], row["priority"]) == ("helix_entries.line", 42)
    assert query(db_url, f"SELECT session_id FROM {helix_table(db_url, 'sessions')}") == [{"session_id": "cli-1"}]


def test_a_front_end_stops_a_suspended_run(db_url: str) -> None:
    """A front end has no launched runtime: the stop of a run suspended on an approval settles with
    the front end's own agents and recovery profile (it used to ask for a launched runtime)."""
    worker = hx.Runtime([_gate_agent()], database_url=db_url).launch()
    try:
        handle = worker.start("gate", "hi", session_id="fs-1")
        assert handle.result(timeout=60).status == "suspended_client_tool"
    finally:
        worker.shutdown()
    front = hx.Runtime([_gate_agent()], database_url=db_url, mode="client").launch()
    try:
        receipt = front.stop("fs-1", kind="interrupt", requested_by="operator")
        assert (receipt.stopped, receipt.status) == (True, "interrupted")
        run = front.get_run(handle.run_id)
        assert run.status == "interrupted" and run.pending == []
        calls = query(db_url, f"SELECT status FROM {helix_table(db_url, 'calls')} WHERE session_id = 'fs-1'")
        assert [c["status"] for c in calls] == ["run_stopped"]
    finally:
        front.shutdown()
