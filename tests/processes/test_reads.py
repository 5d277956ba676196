"""Reads on both databases: one reader for the runtime, the service and the CLI; typed errors where a
read or a wait refuses; the HTTP schema derived from the Python views, never a hand copy."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest

import helix_dbos as hx
from helix_dbos import views, wire
from helix_dbos.errors import (
    CallNotFoundError,
    ConfigurationError,
    HelixError,
    RunNotFoundError,
    RunTimeoutError,
    SessionNotFoundError,
)
from helix_dbos.ledger.statuses import RunStatus
from helix_dbos.runtime import Reader
from tests.conftest import one_database
from tests.support.familykit import Family
from tests.scenarios import family

ROOT = Path(__file__).resolve().parents[2]


def test_a_wait_that_runs_out_of_time_is_typed_and_the_run_goes_on(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    fam.hold("model_waiter")  # its model request holds: the run cannot come to rest yet
    handle = rt.start("waiter", "go")
    for wait in (lambda: handle.result(timeout=0.2), lambda: rt.wait(handle.session_id, timeout=0.2), lambda: rt.wait_run(handle.run_id, timeout=0.2)):
        with pytest.raises(RunTimeoutError) as caught:
            wait()
        assert caught.value.code == "run_timeout" and caught.value.retryable
        assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, HelixError)  # old `except TimeoutError` still works
        assert caught.value.detail["timeout"] == 0.2
    assert rt.get_run(handle.run_id).status == "running"
    fam.release("model_waiter")
    # without a timeout it is the same ledger wait (no DBOS get_result): it returns once at rest
    assert handle.result().status == "completed"
    assert handle.result() == handle.result(timeout=5) == rt.wait(handle.session_id)


def test_a_caller_waits_on_its_runs_workflow_not_by_polling_the_ledger(make_runtime: Any, fam: Family) -> None:
    """``RunHandle.result()`` of a run started in this process sleeps on the workflow's future: a run
    held for 1.5 s costs its caller a read after the first slice and the read once it ends, where a
    ledger poll (5 ms, growing to 250 ms) made a dozen."""
    import threading

    from sqlalchemy import event

    rt = make_runtime(family.AGENTS)
    fam.hold("model_waiter")
    handle = rt.start("waiter", "go")
    me = threading.get_ident()
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() == me:
            statements.append(statement)

    base = rt.engine.engine
    event.listen(base, "before_cursor_execute", count)
    timer = threading.Timer(1.5, fam.release, ("model_waiter",))
    timer.start()
    try:
        result = handle.result(timeout=60)
    finally:
        event.remove(base, "before_cursor_execute", count)
        timer.cancel()
    assert result.status == "completed"
    runs_reads = [s for s in statements if "runs" in s]
    assert 1 <= len(runs_reads) <= 2, statements  # the slice's read (not at rest) and the final one
    assert len(statements) <= 4, statements


def test_stop_returns_a_frozen_receipt(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    fam.hold("model_waiter")
    live = rt.start("waiter", "go")
    receipt = rt.stop(live.session_id, kind="abort", requested_by="ops")
    assert receipt == hx.StopReceipt(session_id=live.session_id, run_id=live.run_id, kind="abort", stopped=False, status="stop_requested")
    with pytest.raises(dataclasses.FrozenInstanceError):
        receipt.status = "failed"  # type: ignore[misc]
    fam.release("model_waiter")
    assert live.result(timeout=60).status == "failed"

    suspended = rt.start("clienty", "ask").result(timeout=60)
    now = rt.stop(suspended.session_id)
    assert (now.stopped, now.status, now.kind) == (True, "interrupted", "interrupt")


def test_session_view_call_and_reader_refusals_are_typed(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    result = rt.start("clienty", "ask").result(timeout=60)
    view = rt.session(result.session_id)
    [pending] = result.pending
    assert view.call(pending.dispatch_id).tool_name == "ask_user"
    with pytest.raises(CallNotFoundError) as caught:  # was a bare StopIteration
        view.call("nope")
    assert caught.value.code == "call_not_found"

    reader = rt.reader
    with pytest.raises(CallNotFoundError):
        reader.call("nope")
    with pytest.raises(RunNotFoundError):
        reader.session_of_run("nope")
    with pytest.raises(RunNotFoundError):
        reader.run("nope")
    for read in (lambda: reader.session("nope"), lambda: reader.summary("nope"), lambda: reader.events("nope"), lambda: reader.wait("nope", 1)):
        with pytest.raises(SessionNotFoundError):
            read()


def test_the_reader_is_what_the_runtime_reads(make_runtime: Any, fam: Family, db_url: str) -> None:
    from helix_dbos.ledger.engine import create_sync_engine

    rt = make_runtime(family.AGENTS)
    result = rt.start("clienty", "ask").result(timeout=60)
    sid = result.session_id
    engine = create_sync_engine(db_url)
    try:
        bare = Reader(engine)  # no DBOS, no runtime: what the CLI reads with
        assert bare.session(sid) == rt.session(sid) and bare.run(result.run_id) == rt.get_run(result.run_id) == result
        view = bare.session(sid)
        # each record holds exactly the keys its type declares
        assert all(set(r) == set(views.RunRecord.__annotations__) for r in view.runs)
        assert all(set(c) == set(views.CheckpointRecord.__annotations__) for c in view.checkpoints)
        assert all(set(a) == set(views.AttemptRecord.__annotations__) for c in view.calls for a in c.attempts)
        [summary] = [s for s in bare.sessions(100) if s["session_id"] == sid]
        assert set(summary) == set(views.SessionSummary.__annotations__) and summary == bare.summary(sid)
        assert bare.session_of_run(result.run_id) == summary and view.owner is None
        page = bare.events(sid)
        assert page.status == "suspended_client_tool" and [e["seq"] for e in page.events] == list(range(1, page.last_seq + 1))
        assert [e["seq"] for e in bare.events(sid, after=2, limit=3).events] == [3, 4, 5]
        rows = bare.calls(session_id=sid)
        assert {r["tool_name"] for r in rows} == {"ask_user", "note"} and all(set(r) == set(views.CallRecord.__annotations__) for r in rows)
        assert bare.call(rows[0]["dispatch_id"]) == rows[0]
        assert sid in bare.session_ids_starting(sid[:6]) and bare.session_ids_starting("zz-none") == []
        assert bare.dispatch_ids_starting(sid, result.pending[0].dispatch_id[:6]) == [result.pending[0].dispatch_id]
        assert bare.executor_ever_ran(rt.executor_id) and not bare.executor_ever_ran("never-" + uuid.uuid4().hex)
        assert rt.executor_id in {e["executor_id"] for e in bare.executors()}
    finally:
        engine.dispose()


def _names(view: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(view)} if dataclasses.is_dataclass(view) else set(view.__annotations__)


@one_database  # the schema derived from the views' types
def test_the_http_schema_is_derived_from_the_views(make_runtime: Any, fam: Family) -> None:
    from helix_dbos.service import schemas
    from helix_dbos.service.app import create_app

    rt = make_runtime(family.AGENTS)
    spec = create_app(rt).openapi()
    components = spec["components"]["schemas"]
    derived = {
        "RunOut": views.RunResult, "PendingCallOut": views.PendingCall, "CallOut": views.CallView, "AttemptOut": views.AttemptRecord,
        "SessionOut": views.SessionView, "RunRow": views.RunRecord, "CheckpointOut": views.CheckpointRecord,
        "SessionSummary": views.SessionSummary, "StopOut": views.StopReceipt, "ExecutorOut": views.ExecutorRecord,
    }
    for name, view in derived.items():
        assert set(components[name]["properties"]) == _names(view), name
        assert getattr(schemas, name) is getattr(wire, name)  # one model, not a copy
    assert set(components["UsageOut"]["properties"]) == _names(views.Usage) | {"total_tokens"}
    # the names HTTP clients read stay as they were
    assert {"dispatch_id", "tool_name", "kind", "args", "status", "attempts", "result", "error", "replay", "step", "position", "run_id", "note",
            "tool_call_id", "approved", "approval_actor", "child_session_id", "decided_by", "check_outcome"} <= set(components["CallOut"]["properties"])
    assert {"session_id", "agent_name", "owner", "status", "current_run_id", "messages", "runs", "checkpoints", "calls"} <= set(components["SessionOut"]["properties"])
    assert components["RunOut"]["properties"]["status"]["enum"] == list(typing.get_args(RunStatus))  # the ledger's words
    assert "CallView" not in components  # the dataclass is not published beside its model

    result = rt.start("clienty", "ask").result(timeout=60)
    body = wire.session_out(rt.session(result.session_id)).model_dump(mode="json")
    assert body["calls"][0]["attempts"] == [] and body["messages"][0]["kind"] == "request"
    assert wire.run_out(result).model_dump(mode="json")["usage"]["total_tokens"] == result.usage.total_tokens


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_the_cli_imports_nothing_from_the_service(tmp_path: Path) -> None:
    for path in sorted((ROOT / "helix_dbos" / "cli").glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith(("..service", "helix_dbos.service"))}
        assert not bad, (path.name, bad)
    # and at run time: a read, its JSON and the loader leave the service unimported
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    code = (
        "import sys, json; from typer.testing import CliRunner; from helix_dbos.cli.main import app; "
        f"r = CliRunner().invoke(app, ['migrate', '--db', {url!r}]); assert r.exit_code == 0, r.output; "
        f"r = CliRunner().invoke(app, ['sessions', '--db', {url!r}, '--json']); assert r.exit_code == 0, r.output; "
        "from helix_dbos.loader import load_runtime; load_runtime(); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('helix_dbos.service'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_unlaunched_runtime_and_definitions_refuse_typed() -> None:
    rt = hx.Runtime(family.AGENTS)
    with pytest.raises(ConfigurationError):
        rt.executor_id  # was an AssertionError  # noqa: B018
    with pytest.raises(ConfigurationError):
        rt.session("s1")
    with pytest.raises(ConfigurationError):  # an agent without output_type has no structured output to validate
        family.clienty.validate_output({"response": 1})
    with pytest.raises(ConfigurationError):
        family.clienty.dump_output(1)
    ask = family.ask_user  # a client tool: its body is the client's, never the runtime's
    with pytest.raises(ConfigurationError):
        ask.invoke_sync(None, None)  # type: ignore[arg-type]
