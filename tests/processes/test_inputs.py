"""Strings the stores refuse, on both databases: what a model or a tool produced is kept exactly;
what a caller sends is refused typed, with nothing stored. And one rule for session ids, at every door.

Postgres refuses NUL in ``text`` and ``jsonb``; neither database can encode a lone surrogate. The
ledger escapes both (``helix_dbos/ledger/escape.py``); callers get ``validation_error``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from sqlalchemy.dialects.postgresql import JSONB
from typer.testing import CliRunner

import helix_dbos as hx
from helix_dbos.cli.main import app as cli
from helix_dbos.errors import ValidationError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.conftest import one_database
from tests.support.familykit import dump_ledger
from tests.processes.test_service import Service, expect_error, services  # noqa: F401  (the fixture)

#: NUL, a lone high and a lone low surrogate, and the escape's own introducer followed by hex digits
#: (which must come back as typed, not decoded).
ODD = "nul:\x00 high:\ud800 low:\udfff esc:\u241b0000 end"
#: Usage given up front: FunctionModel would otherwise estimate tokens by JSON-encoding the messages,
#: which pydantic cannot do for a lone surrogate (a limit of the model, not of the ledger).
USAGE = RequestUsage(input_tokens=3, output_tokens=2)
#: ODD as a model is sent it: a provider's request is UTF-8 JSON, so a lone surrogate goes in the
#: ledger's escape form (``escape.readable_json``); NUL and a literal escape go as they are.
SENT = ODD.replace("\ud800", "\u241bd800").replace("\udfff", "\u241bdfff")


def _engine(db_url: str) -> sa.Engine:
    return create_sync_engine(db_url, poolclass=sa.pool.NullPool)


def _dump(db_url: str) -> dict[str, list[tuple[str, ...]]]:
    engine = _engine(db_url)
    try:
        return dump_ledger(engine)
    finally:
        engine.dispose()


# --- what models and tools produce: stored exactly ---------------------------------------------------


def test_the_escape_is_reversible_and_leaves_plain_text_alone() -> None:
    import random

    from helix_dbos.ledger.escape import escape_json, escape_text, unescape_json, unescape_text

    pool = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\u241b", "0", "d", "f", "a", " ", "é", "\u241b0000", "\u241bd800"]
    rng = random.Random(7)
    samples = ["", "plain text", "é ✓ 你好", *("".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(2000))]
    for text in samples:
        stored = escape_text(text)
        assert unescape_text(stored) == text, repr(text)
        assert "\x00" not in stored and not any("\ud800" <= c <= "\udfff" for c in stored), repr(stored)
        stored.encode("utf-8")  # both databases can hold it
    for plain in ("plain text", "é ✓ 你好", "\\u0000 is six characters"):
        assert escape_text(plain) == plain
    tree = {"k\x00": ["\ud800", {"\u241b": None, "n": 1.5}], "ok": True}
    assert unescape_json(escape_json(tree)) == tree


def test_model_text_args_and_tool_results_and_errors_round_trip_exactly(make_runtime: Any, db_url: str) -> None:
    requests: list[list[ModelMessage]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(messages)
        if len(requests) == 1:
            args = json.dumps({"text": ODD})  # providers send arguments as JSON text: escapes and all
            return ModelResponse(parts=[TextPart("thinking " + ODD), ToolCallPart("echo", args, "c1"), ToolCallPart("boom", args, "c2")], usage=USAGE)
        return ModelResponse(parts=[TextPart("done " + ODD)], usage=USAGE)

    @hx.tool
    async def echo(ctx: hx.ToolContext, text: str) -> dict[str, Any]:
        """Echo the text back."""
        return {"echo": text, "list": [text, 1], "key\x00": "nul in a key", text: "the text as a key"}

    @hx.tool
    async def boom(ctx: hx.ToolContext, text: str) -> str:
        """Fail with the text."""
        raise RuntimeError("bad " + text)

    rt = make_runtime([hx.Agent("odd", FunctionModel(reply), tools=[echo, boom])])
    result = rt.start("odd", "go").result(timeout=60)
    assert result.status == "completed", result.error
    assert result.output == "done " + ODD

    # the ledger, read through the runtime, gives back the exact strings
    view = rt.session(result.session_id)
    (echoed,) = view.calls_named("echo")
    (failed,) = view.calls_named("boom")
    expected_result = {"echo": ODD, "list": [ODD, 1], "key\x00": "nul in a key", ODD: "the text as a key"}
    expected_error = {"type": "RuntimeError", "message": "bad " + ODD}
    assert echoed.status == "ok" and echoed.args == {"text": ODD} and echoed.result == expected_result
    assert failed.status == "error" and failed.args == {"text": ODD} and failed.error == expected_error
    first = view.messages[1]
    assert isinstance(first, ModelResponse) and first.parts[0].content == "thinking " + ODD  # type: ignore[union-attr]
    assert view.messages[-1].parts[0].content == "done " + ODD  # type: ignore[union-attr]

    # the next model request received them as a provider can be sent them, and the model was asked twice, no more
    assert len(requests) == 2
    history = requests[1]
    assert history[1].parts[0].content == "thinking " + SENT  # type: ignore[union-attr]
    answers = history[-1]
    assert isinstance(answers, ModelRequest)
    returns = {p.tool_name: p.content for p in answers.parts if isinstance(p, ToolReturnPart)}
    sent_result = {"echo": SENT, "list": [SENT, 1], "key\x00": "nul in a key", SENT: "the text as a key"}
    assert returns == {"echo": sent_result, "boom": {"status": "error", "error": {"type": "RuntimeError", "message": "bad " + SENT}}}

    # SQL sees the documented escape (docs/audit.md), identically on both databases
    engine = _engine(db_url)
    raw_json = sa.JSON().with_variant(JSONB(), "postgresql")
    try:
        with engine.connect() as conn:
            stored = conn.execute(
                sa.select(sa.type_coerce(t.calls.c.result, raw_json)).where(t.calls.c.dispatch_id == echoed.dispatch_id)
            ).scalar_one()
            note = conn.execute(sa.select(sa.type_coerce(t.runs.c.output, raw_json)).where(t.runs.c.run_id == result.run_id)).scalar_one()
    finally:
        engine.dispose()
    escaped = "nul:\u241b0000 high:\u241bd800 low:\u241bdfff esc:\u241b241b0000 end"
    assert stored["echo"] == escaped and stored["key\u241b0000"] == "nul in a key"
    assert note == "done " + escaped

    # the CLI prints it (a lone surrogate as its escape) instead of dying in a traceback
    from helix_dbos.cli import common

    common.console.width = common.err_console.width = 200
    shown = CliRunner().invoke(cli, ["show", result.session_id, "--db", db_url])
    assert shown.exit_code == 0 and shown.exception is None, shown.output
    assert "done nul:" in shown.output and "high:\\ud800" in shown.output
    as_json = CliRunner().invoke(cli, ["show", result.session_id, "--db", db_url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert {c["tool_name"]: c["result"] for c in json.loads(as_json.stdout)["session"]["calls"]}["echo"] == expected_result


@pytest.mark.kills
@pytest.mark.parametrize("point", ["after_model", "after_append"])
def test_odd_strings_survive_a_crash_and_dbos_replay_exactly(db_url: str, tmp_path: Path, point: str) -> None:
    """DBOS recorded the reply (and the append's output) escaped; the relaunch replays it to the exact strings."""
    from tests.support.crashkit import Kit, calls_by_tool, transcript_problems
    from tests.scenarios.app import ODD as APP_ODD

    k = Kit(db_url, tmp_path, scenario="odd")
    k.crash(point)
    woke = k.wake().result
    assert woke is not None and woke["status"] == "completed" and woke["output"] == "done " + APP_ODD
    assert k.model_steps() == {0: 1, 1: 1}  # the saved reply was never asked for again
    calls = calls_by_tool(woke)
    bodies = k.lines("bodies")
    # the safe call ran from the replayed arguments, exactly; the unsafe one too unless it was saved first
    assert [b["key"] for b in bodies if b["tool"] == "safe_set"] == [APP_ODD + "0"]
    assert calls["safe_set"]["status"] == "ok"
    (asked,) = [m for m in k.lines("model") if m["step"] == 1]
    sent = APP_ODD.replace("\ud800", "\u241bd800").replace("\udfff", "\u241bdfff")  # as a provider is sent it
    assert asked["history"][0] == "on it " + sent
    assert {"tool": "safe_set", "key": sent + "0"}.items() <= next(s for s in asked["seen"] if isinstance(s, dict) and s.get("tool") == "safe_set").items()
    assert transcript_problems(db_url, k.session) == []


# --- what callers send: refused, nothing stored -------------------------------------------------------


def _suspending_model() -> FunctionModel:
    """Asks a client tool and an approval in one reply (the run suspends on both), then finishes."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("ask", {"q": "colour?"}, "a1"), ToolCallPart("book", {"what": "table"}, "b1")], usage=USAGE)
        return ModelResponse(parts=[TextPart("ok")], usage=USAGE)

    return FunctionModel(reply)


class Question(pydantic.BaseModel):
    q: str


def _suspending_agent() -> hx.Agent:
    @hx.tool(requires_approval=True)
    async def book(ctx: hx.ToolContext, what: str) -> str:
        """Book something."""
        return "booked"

    ask = hx.client_tool(name="ask", description="Ask the user.", input_schema=Question)
    return hx.Agent("hitl", _suspending_model(), tools=[ask, book])


BAD_TEXTS = ["nul \x00 inside", "lone \ud800 surrogate", "\udfff"]


def test_caller_text_with_nul_or_surrogates_is_refused_and_nothing_is_stored(make_runtime: Any, db_url: str) -> None:
    rt = make_runtime([_suspending_agent()])
    suspended = rt.start("hitl", "hello").result(timeout=60)
    assert suspended.status == "suspended_client_tool"
    sid = suspended.session_id
    by_kind = {p.kind: p.dispatch_id for p in suspended.pending}
    before = _dump(db_url)

    attempts: list[Callable[[], Any]] = []
    for bad in BAD_TEXTS:
        attempts += [
            lambda bad=bad: rt.start("hitl", bad),
            lambda bad=bad: rt.start("hitl", bad, session_id=sid),
            lambda bad=bad: rt.start("hitl", bad, session_id="fresh-" + uuid.uuid4().hex),
            lambda bad=bad: rt.resume(sid, mode="with_message", message=bad),
            lambda bad=bad: rt.retry(sid, message=bad),
            lambda bad=bad: rt.retry(sid, message="fine", checkpoint_id=bad),
            lambda bad=bad: rt.submit_tool_result(sid, by_kind["client"], error=bad),
            lambda bad=bad: rt.submit_tool_result(sid, bad, result=1),
            lambda bad=bad: rt.approve(sid, by_kind["approval"], approved=False, reason=bad),
            lambda bad=bad: rt.approve(sid, by_kind["approval"], actor=bad),
            lambda bad=bad: rt.stop(sid, requested_by=bad),
            lambda bad=bad: asyncio.run(rt.start_async("hitl", bad)),
        ]
    for attempt in attempts:
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert refused.value.code == "validation_error" and refused.value.message
    assert _dump(db_url) == before, "a refused call changed the ledger"

    # and well-formed answers still go through
    rt.approve(sid, by_kind["approval"], approved=True, actor="ops", reason="fine")
    receipt = rt.submit_tool_result(sid, by_kind["client"], result={"answer": "green"})
    assert receipt.run is not None and receipt.run.result(timeout=60).status == "completed"


@one_database  # request validation, before anything is stored
def test_http_refuses_caller_text_with_nul_or_surrogates_typed(db_url: str, services: Callable[..., Service]) -> None:  # noqa: F811
    service = services()
    with service.client() as http:
        waiting = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "dinner in Lisbon"}).json()
        sid, approval = waiting["session_id"], waiting["pending"][0]["dispatch_id"]
        before = _dump(db_url)
        # NUL arrives as the JSON escape \u0000; a lone surrogate as \ud800 (raw bytes are not UTF-8)
        for bad in ('"nul \\u0000 here"', '"lone \\ud800 here"'):
            for method, path, body in [
                ("POST", "/sessions", f'{{"agent": "concierge", "message": {bad}}}'),
                ("POST", "/sessions", f'{{"agent": "concierge", "message": {bad}, "session_id": "new-one"}}'),
                ("POST", f"/sessions/{sid}/turns", f'{{"message": {bad}}}'),
                ("POST", f"/sessions/{sid}/resume", f'{{"mode": "with_message", "message": {bad}}}'),
                ("POST", f"/sessions/{sid}/retry", f'{{"message": {bad}}}'),
                ("POST", f"/sessions/{sid}/stop", f'{{"requested_by": {bad}}}'),
                ("POST", f"/sessions/{sid}/calls/{approval}/approval", f'{{"approved": false, "reason": {bad}}}'),
                ("POST", f"/sessions/{sid}/calls/{approval}/approval", f'{{"approved": true, "actor": {bad}}}'),
                ("POST", f"/sessions/{sid}/calls/{approval}/result", f'{{"error": {bad}}}'),
            ]:
                response = http.request(method, path, content=body.encode(), headers={"content-type": "application/json"})
                expect_error(response, 400, "validation_error")
        assert _dump(db_url) == before, "a refused request changed the ledger"


# --- session ids: one rule, every door ----------------------------------------------------------------

BAD_SESSION_IDS = ["", " ", "a/b", "../x", "x" * 65, "tab\there", "nul\x00", "é"]


@one_database  # the session id rule, before any read
def test_python_api_refuses_bad_session_ids_typed(make_runtime: Any, db_url: str) -> None:
    rt = make_runtime([_suspending_agent()])
    ok = rt.start("hitl", "hello", session_id="A-z_0.9:" + "x" * 56).result(timeout=60)  # 64 characters: allowed
    assert ok.status == "suspended_client_tool" and len(ok.session_id) == 64
    before = _dump(db_url)
    for bad in BAD_SESSION_IDS:
        for attempt in [
            lambda: rt.start("hitl", "hi", session_id=bad),
            lambda: rt.resume(bad),
            lambda: rt.resume(bad, mode="with_message", message="hi"),
            lambda: rt.retry(bad),
            lambda: rt.stop(bad),
            lambda: rt.approve(bad, "d1"),
            lambda: rt.submit_tool_result(bad, "d1", result=1),
            lambda: rt.wait(bad, timeout=1),
            lambda: rt.session(bad),
            lambda: asyncio.run(rt.start_async("hitl", "hi", session_id=bad)),
            lambda: asyncio.run(rt.resume_async(bad)),
            lambda: asyncio.run(rt.retry_async(bad)),
            lambda: asyncio.run(rt.stop_async(bad)),
            lambda: asyncio.run(rt.approve_async(bad, "d1")),
            lambda: asyncio.run(rt.submit_tool_result_async(bad, "d1", result=1)),
            lambda: asyncio.run(rt.wait_async(bad, timeout=1)),
            lambda: asyncio.run(rt.session_async(bad)),
        ]:
            with pytest.raises(ValidationError) as refused:
                attempt()
            assert refused.value.code == "validation_error" and "session id" in refused.value.message, (bad, refused.value)
    assert _dump(db_url) == before


@one_database  # the session id rule, before any read
def test_http_uses_the_same_session_id_rule(db_url: str, services: Callable[..., Service]) -> None:  # noqa: F811
    service = services()
    with service.client() as http:
        before = _dump(db_url)
        for bad in BAD_SESSION_IDS:
            expect_error(http.post("/sessions", json={"agent": "concierge", "message": "hi", "session_id": bad}), 400, "validation_error")
        # path parameters: ids a URL can carry as one segment
        for bad in ["%20", "x" * 65, "tab%09here", "%C3%A9", "a%2Fb"]:
            for method, path, body in [
                ("GET", f"/sessions/{bad}", None),
                ("GET", f"/sessions/{bad}/events", None),
                ("POST", f"/sessions/{bad}/turns", {"message": "hi"}),
                ("POST", f"/sessions/{bad}/resume", {}),
                ("POST", f"/sessions/{bad}/retry", {}),
                ("POST", f"/sessions/{bad}/stop", {}),
                ("POST", f"/sessions/{bad}/calls/d1/approval", {"approved": True}),
                ("POST", f"/sessions/{bad}/calls/d1/result", {"result": 1}),
            ]:
                response = http.request(method, path, json=body)
                if bad == "a%2Fb" and response.status_code == 404:
                    continue  # some stacks decode %2F before routing: then no route matches, also refused
                expect_error(response, 400, "validation_error")
        assert _dump(db_url) == before


@one_database  # the session id rule, before any read
def test_cli_refuses_bad_session_ids_with_a_clean_message(db_url: str, tmp_path: Path) -> None:
    from helix_dbos.cli import common

    common.console.width = common.err_console.width = 200  # Rich must not fold the message across lines
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate", "--db", db_url]).exit_code == 0
    before = _dump(db_url)
    for bad in ["", " ", "a/b", "../x", "x" * 65]:
        for args in [
            ["show", bad],
            ["calls", "--session", bad],
            ["start", "concierge", "hi", "--session", bad],
            ["resume", bad],
            ["retry", bad],
            ["stop", bad],
            ["approve", bad, "d1"],
            ["submit", bad, "d1", "--result", "1"],
        ]:
            out = runner.invoke(cli, [*args, "--db", db_url])
            assert out.exit_code == 1, (args, out.output, out.exception)
            assert out.exception is None or isinstance(out.exception, SystemExit), (args, out.exception)
            assert "validation_error" in out.output and "session id" in out.output and "Traceback" not in out.output, (args, out.output)
            as_json = runner.invoke(cli, [*args, "--db", db_url, "--json"])
            assert as_json.exit_code == 1 and json.loads(as_json.stdout)["code"] == "validation_error", (args, as_json.output)
    assert _dump(db_url) == before


def test_http_reads_of_odd_strings_are_valid_json_with_the_exact_strings(db_url: str) -> None:
    """The service renders what the ledger holds: a lone surrogate becomes its JSON escape, not a 500."""
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("echo", json.dumps({"text": ODD}), "c1")], usage=USAGE)
        return ModelResponse(parts=[TextPart("done " + ODD)], usage=USAGE)

    @hx.tool
    async def echo(ctx: hx.ToolContext, text: str) -> dict[str, Any]:
        """Echo the text back."""
        return {"echo": text, text: "a key"}

    runtime = hx.Runtime([hx.Agent("odd", FunctionModel(reply), tools=[echo])], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")
    with TestClient(create_app(runtime), raise_server_exceptions=False, base_url="http://localhost") as http:  # a trusted Host
        run = http.post("/sessions", params={"wait": 30}, json={"agent": "odd", "message": "go"})
        assert run.status_code == 202, run.text
        assert run.json()["status"] == "completed" and run.json()["output"] == "done " + ODD
        view = http.get(f"/sessions/{run.json()['session_id']}")
        assert view.status_code == 200, view.text
        view.content.decode("utf-8")  # strict UTF-8: the surrogate travels as the JSON escape \ud800
        (call,) = view.json()["calls"]
        assert call["args"] == {"text": ODD} and call["result"] == {"echo": ODD, ODD: "a key"}
        assert view.json()["messages"][2]["parts"][0]["content"] == {"echo": ODD, ODD: "a key"}  # what the model read
        assert http.get(f"/runs/{run.json()['run_id']}").json()["output"] == "done " + ODD
        events = http.get(f"/sessions/{run.json()['session_id']}/events")
        assert events.status_code == 200 and "tool_end" in events.text
