"""DBOS's own operator commands on helix runs: ``dbos workflow fork``, ``resume`` and ``cancel``.

Each test drives the real ``dbos`` CLI against the test's database while a real application process
serves DBOS's queues, and checks what the contract promises: a fork or a resumed superseded run
never writes the ledger, never asks the model and never starts a body (it ends ERROR with the typed
``run_fenced`` error and one ``run_refused`` event); a cancel settles like ``stop(kind="abort")``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.support.crashkit import Kit, dbos_table, helix_table, query, transcript_problems
from tests.support.waiting import wait_for

DBOS_CLI = str(Path(sys.executable).parent / "dbos")


def dbos_cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``dbos workflow ...`` command, as an operator types it."""
    proc = subprocess.run([DBOS_CLI, "workflow", *args, "-s", db_url], capture_output=True, text=True, timeout=240)  # its start-up alone took 50 s on a loaded machine
    assert proc.returncode == 0, f"dbos workflow {' '.join(args)} failed: {proc.stdout}\n{proc.stderr}"
    return proc


helix = helix_table


def workflow(db_url: str, workflow_id: str) -> dict[str, Any] | None:
    rows = query(db_url, f"SELECT workflow_uuid, status FROM {dbos_table(db_url, 'workflow_status')} WHERE workflow_uuid = :w", w=workflow_id)
    return rows[0] if rows else None


def dbos_get(db_url: str, workflow_id: str) -> dict[str, Any]:
    """What ``dbos workflow get`` shows the operator (status, and the recorded error)."""
    out = dbos_cli(db_url, "get", workflow_id).stdout
    return json.loads(out[out.index("{") :])


def ledger_dump(db_url: str, session_id: str) -> dict[str, Any]:
    """Everything the ledger holds for one session, except its events (compared separately)."""
    out: dict[str, Any] = {}
    for table in ("runs", "messages", "checkpoints", "calls"):
        rows = query(db_url, f"SELECT * FROM {helix(db_url, table)} WHERE session_id = :s", s=session_id)
        out[table] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    out["attempts"] = sorted(
        json.dumps(r, sort_keys=True, default=str)
        for r in query(
            db_url,
            f"SELECT a.* FROM {helix(db_url, 'attempts')} a JOIN {helix(db_url, 'calls')} c ON c.dispatch_id = a.dispatch_id WHERE c.session_id = :s",
            s=session_id,
        )
    )
    return out


def events(db_url: str, session_id: str) -> list[dict[str, Any]]:
    return query(db_url, f"SELECT seq, type, run_id, data FROM {helix(db_url, 'events')} WHERE session_id = :s ORDER BY seq", s=session_id)


class Server:
    """A live application process serving DBOS's queues (forked and resumed workflows run there)."""

    def __init__(self, kit: Kit, **kw: Any) -> None:
        self.stop_file = kit.workdir / f"stop-{time.monotonic_ns()}"
        self.proc = kit.spawn("serve", "--seconds", "120", "--until", str(self.stop_file), **kw)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("{"), f"server did not start: {line!r}"

    def close(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _refused(db_url: str, workflow_id: str) -> dict[str, Any] | None:
    wf = workflow(db_url, workflow_id)
    return wf if wf is not None and wf["status"] in ("ERROR", "SUCCESS", "CANCELLED") else None


def test_fork_of_a_helix_run_is_refused_at_every_step(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="mixed")
    first = kit.start()
    assert first.code == 0 and first.result is not None and first.result["status"] == "completed", first.stderr[-2000:]
    run_id = first.result["run_id"]
    bodies, model = kit.bodies(), kit.model_steps()
    before, seen_events = ledger_dump(db_url, kit.session), len(events(db_url, kit.session))

    server = Server(kit)
    try:
        forks = []
        for step in (0, 1, 2, 3, 5):
            fork_id = f"fork-{step}-{run_id[:8]}"
            dbos_cli(db_url, "fork", run_id, "-S", str(step), "-f", fork_id)
            forks.append(fork_id)
        for fork_id in forks:
            wait_for(f"fork {fork_id} to end", lambda f=fork_id: _refused(db_url, f))
            shown = dbos_get(db_url, fork_id)
            assert shown["status"] == "ERROR" and "refused" in shown["error"] and "fork" in shown["error"], shown
    finally:
        server.close()

    assert kit.bodies() == bodies, "a fork started a tool body"
    assert kit.model_steps() == model, "a fork asked the model"
    assert ledger_dump(db_url, kit.session) == before, "a fork wrote the ledger"
    new = events(db_url, kit.session)[seen_events:]
    assert [e["type"] for e in new] == ["run_refused"] * len(forks), new
    assert transcript_problems(db_url, kit.session) == []


@pytest.mark.kills
def test_resume_of_a_superseded_run_is_refused(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="mixed")
    kit.crash("after_body:unsafe_send")
    old_run = query(db_url, f"SELECT current_run_id FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]["current_run_id"]
    # another executor takes the session over: the old executor is gone, its run ends executor_lost
    taken = kit.entry("continue", executor=f"{kit.executor}-b")
    assert taken.code == 0 and taken.result is not None and taken.result["status"] == "completed", taken.stderr[-3000:]
    runs = {r["run_id"]: r for r in taken.result["runs"]}
    assert runs[old_run]["status"] == "failed"
    bodies, model = kit.bodies(), kit.model_steps()
    assert bodies["unsafe_send"] == 1
    before, seen_events = ledger_dump(db_url, kit.session), len(events(db_url, kit.session))

    server = Server(kit)
    try:
        dbos_cli(db_url, "resume", old_run)
        wait_for("the resumed run to end", lambda: (w := workflow(db_url, old_run)) and w["status"] in ("ERROR", "SUCCESS"))
        shown = dbos_get(db_url, old_run)
        assert shown["status"] == "ERROR" and "superseded" in shown["error"], shown
    finally:
        server.close()

    assert kit.bodies() == bodies, "the superseded run started a body"
    assert kit.model_steps() == model, "the superseded run asked the model"
    assert ledger_dump(db_url, kit.session) == before, "the superseded run wrote the ledger"
    assert [e["type"] for e in events(db_url, kit.session)[seen_events:]] == ["run_refused"]
    assert transcript_problems(db_url, kit.session) == []


@pytest.mark.kills
def test_cancel_of_a_running_run_settles_like_an_abort(db_url: str, tmp_path: Path) -> None:
    kit = Kit(db_url, tmp_path, scenario="cancel")
    release = tmp_path / "release"  # the body ends once the cancel committed: DBOS's CLI takes seconds to start
    proc = kit.spawn("start", extra_env={"SCENARIO_DELAY": "90", "SCENARIO_RELEASE": str(release)})
    try:
        wait_for("the slow body to start", lambda: kit.bodies()["slow_seq"] == 1)
        run_id = query(db_url, f"SELECT current_run_id FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]["current_run_id"]
        dbos_cli(db_url, "cancel", run_id)
        release.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert result["status"] == "failed" and result["error_code"] == "run_stopped", result
    calls = {c["tool"]: c for c in result["calls"]}
    assert calls["slow_seq"]["status"] == "ok", calls  # finished: keeps its result
    assert calls["seq_b"]["status"] == "run_stopped", calls  # never started: paired run_stopped
    assert kit.bodies() == {"slow_seq": 1}
    assert kit.model_steps() == {0: 1}, "the cancelled run asked the model again"
    assert workflow(db_url, run_id)["status"] == "CANCELLED"  # type: ignore[index]
    session = query(db_url, f"SELECT status FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]
    assert session["status"] == "failed"
    stops = query(db_url, f"SELECT kind, requested_by FROM {helix(db_url, 'stops')} WHERE run_id = :r", r=run_id)
    assert stops == [{"kind": "abort", "requested_by": "dbos workflow cancel"}]
    assert transcript_problems(db_url, kit.session) == []

    # the session is free for the next entry ...
    turn = kit.entry("turn", message="again")
    assert turn.code == 0 and turn.result is not None and turn.result["status"] == "completed", turn.stderr[-3000:]
    bodies, model = kit.bodies(), kit.model_steps()
    before = ledger_dump(db_url, kit.session)
    # ... and a later DBOS resume of the cancelled run is refused like any superseded run
    server = Server(kit)
    try:
        dbos_cli(db_url, "resume", run_id)
        wait_for("the resumed run to end", lambda: (w := workflow(db_url, run_id)) and w["status"] in ("ERROR", "SUCCESS"))
        shown = dbos_get(db_url, run_id)
        assert shown["status"] == "ERROR" and "refused" in shown["error"], shown
    finally:
        server.close()
    assert kit.bodies() == bodies and kit.model_steps() == model
    assert ledger_dump(db_url, kit.session) == before
    assert transcript_problems(db_url, kit.session) == []


@pytest.mark.kills
def test_cancel_while_no_process_runs_it_settles_at_the_next_entry(db_url: str, tmp_path: Path) -> None:
    """A run cancelled after its process died (no workflow can notice): the next entry settles it
    as an abort, not as an executor loss, and goes on."""
    kit = Kit(db_url, tmp_path, scenario="mixed")
    kit.crash("after_body:unsafe_send")
    run_id = query(db_url, f"SELECT current_run_id FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]["current_run_id"]
    dbos_cli(db_url, "cancel", run_id)
    nxt = kit.entry("retry")
    assert nxt.code == 0 and nxt.result is not None, nxt.stderr[-3000:]
    runs = {r["run_id"]: r for r in nxt.result["runs"]}
    assert runs[run_id]["status"] == "failed"
    old = query(db_url, f"SELECT error_code FROM {helix(db_url, 'runs')} WHERE run_id = :r", r=run_id)[0]
    assert old["error_code"] == "run_stopped"
    assert nxt.result["status"] == "completed"
    assert kit.bodies()["unsafe_send"] == 1
    assert transcript_problems(db_url, kit.session) == []


@pytest.mark.kills
def test_cancel_while_no_process_runs_it_settles_at_the_wake(db_url: str, tmp_path: Path) -> None:
    """The executor's own relaunch settles a run DBOS cancelled while the process was gone (DBOS
    will never run a cancelled workflow again, so nobody else would)."""
    kit = Kit(db_url, tmp_path, scenario="mixed")
    kit.crash("after_body:unsafe_send")
    run_id = query(db_url, f"SELECT current_run_id FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]["current_run_id"]
    dbos_cli(db_url, "cancel", run_id)
    woke = kit.wake()
    assert woke.result is not None and woke.result["status"] == "failed" and woke.result["error_code"] == "run_stopped", woke.result
    calls = {c["tool"]: c for c in woke.result["calls"]}
    assert all(c["status"] in ("ok", "run_stopped", "outcome_unknown") for c in calls.values()), calls
    assert calls["unsafe_send"]["status"] == "outcome_unknown"  # its body ran, its result was never written
    assert kit.bodies()["unsafe_send"] == 1
    assert kit.model_steps() == {0: 1}
    assert transcript_problems(db_url, kit.session) == []


def test_fork_of_a_running_run_from_python_is_refused(db_url: str, make_runtime: Callable[..., Any]) -> None:
    """``DBOS.fork_workflow`` (DBOS's Python API, not its CLI) of a run while its body is still
    running: each fork ends ERROR with the typed refusal and one ``run_refused`` event, asks no
    model and starts no body; the run itself goes on undisturbed and its transcript stays valid."""
    release, started = threading.Event(), threading.Event()
    bodies: list[str] = []  # counted by the tool itself, outside the runtime
    asked: list[int] = []  # counted by the model

    @hx.tool(replay="safe")
    async def hold(ctx: hx.ToolContext) -> str:
        """Hold until the test lets go."""
        bodies.append(ctx.dispatch_id or "")
        started.set()
        await asyncio.to_thread(release.wait, 60)
        return "held"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(sum(isinstance(m, ModelResponse) for m in messages))
        if asked[-1] == 0:
            return ModelResponse(parts=[ToolCallPart("hold", {}, tool_call_id="h1")])
        return ModelResponse(parts=[TextPart("done")])

    rt = make_runtime([hx.Agent("holder", FunctionModel(reply), tools=[hold])])
    handle = rt.start("holder", "go")
    try:
        assert started.wait(30), "the body never started"
        run_id, session_id = handle.run_id, handle.session_id
        steps = len(DBOS.list_workflow_steps(run_id))
        assert workflow(db_url, run_id)["status"] == "PENDING"  # type: ignore[index]
        forks = [DBOS.fork_workflow(run_id, start) for start in sorted({0, steps})]  # from scratch; past the recorded model step
        for fork in forks:
            fork_id = fork.get_workflow_id()
            assert fork_id != run_id
            with pytest.raises(Exception, match="refused") as refused:
                fork.get_result()
            assert "fork" in str(refused.value), refused.value
            wait_for(f"fork {fork_id} to end", lambda f=fork_id: _refused(db_url, f))
            assert workflow(db_url, fork_id)["status"] == "ERROR"  # type: ignore[index]
        assert bodies == [bodies[0]] and asked == [0], "a fork asked the model or started a body"
    finally:
        release.set()
    result = handle.result(timeout=60)
    assert result.status == "completed" and result.run_id == run_id
    (call,) = rt.session(session_id).calls
    assert (call.status, len(call.attempts)) == ("ok", 1)
    assert len(bodies) == 1 and asked == [0, 1]  # the run went on; nothing ran or was asked twice
    refusals = [e for e in events(db_url, session_id) if e["type"] == "run_refused"]
    assert len(refusals) == len(forks) and {e["run_id"] for e in refusals} == {run_id}, refusals
    assert transcript_problems(db_url, session_id) == []


@pytest.mark.parametrize("settled_by", ["launch", "entry"])
def test_cancel_of_a_queued_run_settles_it(db_url: str, settled_by: str) -> None:
    """``dbos workflow cancel`` of a run still waiting on its entry queue: DBOS never dequeues it, so
    its own workflow never settles the cancel. The next launch (any process: a queued run has no
    executor yet) or the session's next entry settles it like an abort; it used to stay ``queued``
    for ever, its session refusing every entry and ``wait`` never returning."""
    from pydantic_ai.models.test import TestModel

    def agents() -> list[hx.Agent]:
        return [hx.Agent("a", TestModel(call_tools=[], custom_output_text="hi"))]

    front = hx.Runtime(agents(), database_url=db_url, mode="client").launch()  # enqueues, runs nothing
    try:
        handle = front.start("a", "hello")
        run_id, session_id = handle.run_id, handle.session_id
    finally:
        front.shutdown()
    assert query(db_url, f"SELECT status FROM {helix(db_url, 'runs')} WHERE run_id = :r", r=run_id) == [{"status": "queued"}]
    dbos_cli(db_url, "cancel", run_id)
    assert workflow(db_url, run_id)["status"] == "CANCELLED"  # type: ignore[index]

    rt = hx.Runtime(agents(), database_url=db_url, executor_id=f"settle-{settled_by}").launch()
    try:
        if settled_by == "entry":
            nxt = rt.start("a", "again", session_id=session_id).result(timeout=60)
            assert nxt.status == "completed", nxt
        result = rt.reader.wait_run(run_id, 30)
        assert (result.status, result.error_code) == ("failed", "run_stopped"), result
    finally:
        rt.shutdown()
    stops = query(db_url, f"SELECT kind, requested_by FROM {helix(db_url, 'stops')} WHERE run_id = :r", r=run_id)
    assert stops == [{"kind": "abort", "requested_by": "dbos workflow cancel"}]
    session = query(db_url, f"SELECT status, current_run_id FROM {helix(db_url, 'sessions')} WHERE session_id = :s", s=session_id)[0]
    assert session["status"] == ("completed" if settled_by == "entry" else "failed"), session
    assert transcript_problems(db_url, session_id) == []
