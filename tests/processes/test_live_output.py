"""Live model output: text and tool-call deltas on the run's DBOS stream while the step runs,
best-effort and marked so, readable from another process; a recovered step never re-streams."""

from __future__ import annotations

import pytest

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import helix_dbos as hx
from helix_dbos.runtime.flow import live
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.procs import child_env, popen_python_m
from tests.support.provider_server import Calls, Paused, Text, looking_agent, provider_server
from tests.support.waiting import wait_for


def streaming_model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            yield {0: DeltaToolCall(name="look", json_args='{"key": ')}
            yield {0: DeltaToolCall(json_args='"a"}', tool_call_id="c1")}
            return
        for chunk in ["All ", "looked ", "up."]:
            time.sleep(0.05)
            yield chunk

    return FunctionModel(stream_function=stream)


def _texts(values: list[dict[str, Any]], step: int) -> str:
    return "".join(d["text"] for v in values if v["step"] == step and v["type"] == "deltas" for d in v["deltas"] if d["kind"] == "text")


def test_deltas_stream_while_the_step_runs(make_runtime: Any) -> None:
    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    rt = make_runtime([hx.Agent("live", streaming_model(), tools=[look])], live_output=True)
    handle = rt.start("live", "go")
    seen: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: seen.extend(live.read(handle.run_id, timeout=120)))
    reader.start()
    result = handle.result(timeout=60)
    reader.join(40)
    assert result.status == "completed" and result.output == "All looked up."
    assert all(v["best_effort"] is True for v in seen)
    assert [v["type"] for v in seen if v["step"] == 0][0] == "start" and [v["type"] for v in seen if v["step"] == 0][-1] == "end"
    calls = [d for v in seen if v["type"] == "deltas" and v["step"] == 0 for d in v["deltas"]]
    assert calls[0]["kind"] == "tool_call" and calls[0]["tool_name"] == "look"
    assert "".join(d["args"] for d in calls) == '{"key": "a"}'
    assert _texts(seen, 1) == "All looked up."
    # the durable transcript is the same reply a plain request would have saved
    assert rt.session(result.session_id).calls[0].args == {"key": "a"}


def test_off_by_default_writes_nothing(make_runtime: Any) -> None:
    from pydantic_ai.messages import TextPart

    rt = make_runtime([hx.Agent("quiet", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("hi")])))])
    result = rt.start("quiet", "go").result(timeout=60)
    assert result.status == "completed"
    assert list(live.read(result.run_id, timeout=2)) == []


def _app(db_url: str, effects: Path, executor: str, cmd: str, session: str, crash_at: str | None = None,
         provider: str | None = None) -> subprocess.Popen[str]:
    env = child_env()
    env["HELIX_DBOS_LIVE_OUTPUT"] = "1"
    if crash_at:
        env["HELIX_DBOS_CRASH_AT"] = crash_at
    args = [sys.executable, "-m", "tests.scenarios.live_app", "--db", db_url, "--effects", str(effects), "--executor", executor, cmd, "--session", session]
    if provider is not None:
        args += ["--provider", provider]
    effects.mkdir(parents=True, exist_ok=True)
    return popen_python_m(args, env, stdout=subprocess.PIPE, stderr=open(effects / f"{cmd}.stderr", "w"))


def _sse_values(response: Any) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    kind = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


@pytest.mark.kills
@pytest.mark.parametrize("sdk", ["pydantic_ai", "openai_agents"])
def test_live_output_across_processes_and_no_restream_on_recovery(db_url: str, tmp_path: Path, sdk: str) -> None:
    """The service runs in the test process, which is not the worker: its ``/sessions/{id}/live``
    streams the deltas the worker subprocess writes. The worker dies right after step 0's reply was
    recorded; the relaunch recovers that reply without streaming it again and streams only step 1,
    to the same open SSE response. The worker's agent is a pydantic-ai ``FunctionModel``'s, or an
    OpenAI Agents SDK agent streaming from the loopback provider (``stream_response``)."""
    with contextlib.ExitStack() as stack:
        provider = None
        if sdk == "openai_agents":
            server = stack.enter_context(provider_server())
            server.script(Calls([("look", {"key": "a"})], text="Looking "), Text("found it"))
            provider = server.root
        events, out, run_id, effects = _crash_and_follow(db_url, tmp_path, provider)
        if sdk == "openai_agents":
            assert len(server.requests()) == 2 and all(r.body.get("stream") is True for r in server.requests())
    assert out["status"] == "completed" and out["output"] == "found it"
    if sdk == "pydantic_ai":
        model = [json.loads(line) for line in (effects / "model.jsonl").read_text().splitlines()]
        assert [m["step"] for m in model] == [0, 1] and model[0]["pid"] != model[1]["pid"]
    assert events[0] == ("run", {"run_id": run_id, "best_effort": True}) and events[-1][0] == "end"
    seen = [v for k, v in events if k == "live"]
    requests = {(v["step"], v["request"]) for v in seen}
    assert sorted(step for step, _ in requests) == [0, 1]  # one streamed request per step: step 0 never again
    assert _texts(seen, 0) == "Looking " and _texts(seen, 1) == "found it"
    assert all(v["best_effort"] is True for v in seen)


def _crash_and_follow(db_url: str, tmp_path: Path, provider: str | None) -> tuple[list[tuple[str, Any]], dict[str, Any], str, Path]:
    """The worker started, killed after step 0's reply, woken; the service's SSE followed throughout."""
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    effects = tmp_path / "effects"
    executor, session = f"live-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    # serves HTTP only: it never dequeues, never takes the dead worker's runs over, and (another
    # application version) never picks up the run DBOS's recovery re-enqueues on its internal queue
    server = hx.Runtime([hx.Agent("live", streaming_model())], database_url=db_url, executor_id=f"svc-{uuid.uuid4().hex[:8]}",
                        serve_queue=False, takeover=False, application_version="http-only")
    with TestClient(create_app(server), base_url="http://localhost") as client:
        first = _app(db_url, effects, executor, "start", session, crash_at="after_model", provider=provider)
        run_id = json.loads(first.stdout.readline())["run_id"]
        events: list[tuple[str, Any]] = []

        def follow() -> None:
            with client.stream("GET", f"/sessions/{session}/live", params={"timeout": 60}) as response:
                assert response.status_code == 200
                events.extend(_sse_values(response))

        reader = threading.Thread(target=follow)
        reader.start()
        assert first.wait(60) == CRASH_EXIT_CODE
        wake = _app(db_url, effects, executor, "wake", session, provider=provider)
        out = json.loads([ln for ln in wake.communicate(timeout=90)[0].splitlines() if ln.startswith("{")][-1])
        reader.join(70)
    return events, out, run_id, effects


def test_service_streams_live_output_over_sse(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    rt = hx.Runtime([hx.Agent("live", streaming_model(), tools=[look])], database_url=db_url,
                    executor_id=f"svc-{uuid.uuid4().hex[:8]}", live_output=True)
    with TestClient(create_app(rt), base_url="http://localhost") as client:  # a Host the service trusts
        handle = rt.start("live", "go")
        events: list[tuple[str, Any]] = []
        with client.stream("GET", f"/sessions/{handle.session_id}/live", params={"timeout": 30}) as response:
            assert response.status_code == 200
            events.extend(_sse_values(response))
        assert events[0] == ("run", {"run_id": handle.run_id, "best_effort": True}) and events[-1][0] == "end"
        values = [v for k, v in events if k == "live"]
        assert _texts(values, 1) == "All looked up." and all(v["best_effort"] for v in values)
        assert client.get("/sessions/nope/live").status_code == 404


#: The real model classes on the wire to the loopback provider, per SDK: pydantic-ai's
#: ``OpenAIChatModel``/``OpenAIResponsesModel`` and the OpenAI Agents SDK's
#: ``OpenAIChatCompletionsModel``/``OpenAIResponsesModel`` (through ``stream_response``).
WIRED = [pytest.param(sdk, wire, id=f"{sdk}-{wire}") for sdk in ("pydantic_ai", "openai_agents") for wire in ("chat", "responses")]


@pytest.mark.parametrize(("sdk", "wire"), WIRED)
def test_wire_deltas_reach_the_services_live_endpoint_while_the_step_runs(db_url: str, sdk: str, wire: str) -> None:
    """The provider streams step 1's reply word by word and stops after its second word until the
    test lets it go on: by then ``/sessions/{id}/live`` has served those words (the step is still
    running: the rest of the reply has not been sent). Step 0's tool call streams its name and
    arguments; the reply saved for step 1 is the text that streamed."""
    from fastapi.testclient import TestClient

    from helix_dbos.service.app import create_app

    with provider_server() as server:
        name = f"live_{sdk}_{wire}"
        rt = hx.Runtime([looking_agent(sdk, wire, server, name)], database_url=db_url,
                        executor_id=f"svc-{uuid.uuid4().hex[:8]}", live_output=True)
        paused = Paused(Text("All looked up now.", usage=(12, 4)), texts=2)
        server.script(Calls([("look", {"key": "a"})]), paused)
        with TestClient(create_app(rt), base_url="http://localhost") as client:
            handle = rt.start(name, "go")
            events: list[tuple[str, Any]] = []

            def follow() -> None:
                with client.stream("GET", f"/sessions/{handle.session_id}/live", params={"timeout": 60}) as response:
                    assert response.status_code == 200
                    kind = ""
                    for line in response.iter_lines():
                        if line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: "):
                            events.append((kind, json.loads(line[6:])))

            reader = threading.Thread(target=follow)
            reader.start()
            try:
                wait_for("step 1's first words on /live", lambda: _texts([v for k, v in list(events) if k == "live"], 1) == "All looked ")
                assert rt.get_run(handle.run_id).status == "running"  # the reply is half sent: the step runs
            finally:
                paused.release.set()
            result = handle.result(timeout=120)
            reader.join(70)
        requests = server.requests()
    assert (result.status, result.output) == ("completed", "All looked up now."), result
    assert len(requests) == 2 and all(r.body.get("stream") is True for r in requests)
    assert events[0] == ("run", {"run_id": handle.run_id, "best_effort": True}) and events[-1][0] == "end"
    values = [v for k, v in events if k == "live"]
    assert all(v["best_effort"] is True for v in values)
    assert _texts(values, 1) == result.output  # what streamed is what was saved
    calls = [d for v in values if v["type"] == "deltas" and v["step"] == 0 for d in v["deltas"] if d["kind"] == "tool_call"]
    assert calls[0]["tool_name"] == "look" and "".join(d["args"] for d in calls) == '{"key": "a"}'
    assert {(v["step"], v["type"]) for v in values} >= {(0, "start"), (0, "end"), (1, "start"), (1, "end")}


def _cli(monkeypatch: Any, *args: str) -> Any:
    import logging

    from typer.testing import CliRunner

    from helix_dbos.cli.main import app as cli

    monkeypatch.setenv("HELIX_DBOS_APP", "tests.scenarios.live_app:build_runtime")
    monkeypatch.setenv("HELIX_DBOS_LIVE_OUTPUT", "0")  # restored after the test; --live sets it to 1
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    monkeypatch.delenv("HELIX_DBOS_EXECUTOR_ID", raising=False)  # a fresh executor, not the crashed app's
    for handler in logging.getLogger("dbos").handlers:
        if handler.name == "__dbos_console_log_handler__" and isinstance(handler, logging.StreamHandler):
            handler.stream = sys.__stderr__
    return CliRunner().invoke(cli, list(args))


def test_cli_start_live_prints_deltas(monkeypatch: Any, db_url: str) -> None:
    result = _cli(monkeypatch, "start", "live", "go", "--live", "--db", db_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Looking " in out and "→ look" in out and "found it" in out
    assert out.index("Looking") < out.index("found it") < out.index("completed")


@pytest.mark.kills
def test_cli_resume_live_prints_only_the_new_steps_output(monkeypatch: Any, db_url: str, tmp_path: Path) -> None:
    """The app dies right after step 0's reply was saved (``after_append``); ``resume --live`` in a
    fresh process recovers that saved step (its body runs, its reply is not asked for again) and
    prints only step 1's text as it streams: the saved reply is never printed as if new."""
    effects = tmp_path / "effects"
    session = uuid.uuid4().hex
    crashed = _app(db_url, effects, f"live-{uuid.uuid4().hex[:8]}", "start", session, crash_at="after_append")
    assert crashed.wait(60) == CRASH_EXIT_CODE
    result = _cli(monkeypatch, "resume", session, "--live", "--db", db_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "found it" in out and out.index("found it") < out.index("completed"), out
    assert "Looking" not in out and "→ look" not in out, out  # step 0's reply was saved, not streamed again
    model = [json.loads(line) for line in (effects / "model.jsonl").read_text().splitlines()]
    assert [m["step"] for m in model] == [0]  # the crashed app asked once (the CLI's runtime counts nothing)
