"""MCP servers as real components: a small MCP-SDK server over stdio and over streamable HTTP on
loopback, whose tools count their own side effects; the app process is SIGKILLed mid-call."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("fastmcp")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import helix_dbos as hx  # noqa: E402
from tests.support.crashkit import ROOT, transcript_problems  # noqa: E402
from tests.scenarios.mcp_app import mcp_toolset  # noqa: E402
from tests.support.procs import child_env, popen_python_m, run_python_m
from tests.support.effects import read_effects
from tests.support.procs import free_port

SERVER = ROOT / "tests" / "scenarios" / "mcp_server.py"


def _bodies(effects: Path) -> Counter[str]:
    path = effects / "mcp_bodies.jsonl"
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["tool"] for line in path.read_text().splitlines() if line.strip())


def _http_server(effects: Path, transport: str = "http") -> tuple[subprocess.Popen[bytes], str]:
    """The scenario server over streamable HTTP (``http``) or SSE (``sse``) on loopback, and its URL."""
    port = free_port()
    log = open(effects / "server.stderr", "wb")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--effects", str(effects), transport, "--port", str(port)], stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the MCP HTTP server did not come up")


def _app(db_url: str, effects: Path, executor: str | None, where: str, cmd: str, session: str, module: str = "mcp_app") -> list[str]:
    return [sys.executable, "-m", f"tests.scenarios.{module}", "--db", db_url, "--effects", str(effects),
            *(["--executor", executor] if executor else []), "--mcp", where, cmd, "--session", session]


def kill_mid_calls(db_url: str, tmp_path: Path, transport: str, module: str) -> dict[str, Any]:
    """Start the app, SIGKILL it while both MCP calls are in flight, relaunch it; its final JSON line."""
    effects = tmp_path / "effects"
    effects.mkdir()
    (effects / "hold").touch()  # the server holds every call in flight while this file exists
    server, where = _http_server(effects) if transport == "http" else (None, "stdio")
    executor = f"mcp-{uuid.uuid4().hex[:8]}" if module != "dbos_durability_app" else None  # helix apps recover by executor id
    session = uuid.uuid4().hex
    try:
        log = open(effects / "app.stderr", "w")
        app = popen_python_m(_app(db_url, effects, executor, where, "start", session, module), _env(), stdout=subprocess.PIPE, stderr=log)
        deadline = time.monotonic() + 120
        while not (_bodies(effects)["read_stock"] and _bodies(effects)["delete_item"]):
            assert time.monotonic() < deadline and app.poll() is None, (effects / "app.stderr").read_text()[-3000:]
            time.sleep(0.05)
        app.send_signal(signal.SIGKILL)  # a real kill, both bodies started and unfinished
        app.wait(10)
        if transport == "stdio":  # the app's own server child dies with it, as it would in production
            for line in read_effects(effects, "mcp_bodies"):
                try:
                    os.kill(line["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        (effects / "hold").unlink()
        woke = run_python_m(_app(db_url, effects, executor, where, "wake", session, module), _env(), timeout=240)
        assert woke.returncode == 0, woke.stderr[-3000:]
        out = json.loads([ln for ln in woke.stdout.splitlines() if ln.startswith("{")][-1])
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
    return {**out, "session": session, "effects": effects}


def _env() -> dict[str, str]:
    return child_env()


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sigkill_mid_mcp_calls(db_url: str, tmp_path: Path, transport: str) -> None:
    """Both MCP calls in flight when the app dies: the read-only one re-runs, the destructive one is
    answered outcome_unknown, counted by the server's own side-effect file; the model is not asked again."""
    out = kill_mid_calls(db_url, tmp_path, transport, "mcp_app")
    effects, session = out["effects"], out["session"]

    assert out["status"] == "completed" and out["output"] == "done"
    assert _bodies(effects) == Counter({"read_stock": 2, "delete_item": 1})  # the server's own count
    calls = {c["tool"]: c for c in out["calls"]}
    assert (calls["read_stock"]["replay"], calls["read_stock"]["status"]) == ("safe", "ok")  # readOnlyHint
    assert (calls["delete_item"]["replay"], calls["delete_item"]["status"]) == ("unsafe", "outcome_unknown")
    assert calls["read_stock"]["attempts"] == 2 and calls["delete_item"]["attempts"] == 1
    model = read_effects(effects, "model")
    assert [m["step"] for m in model] == [0, 1]  # the saved reply was never asked for again
    told = model[1]["seen"]
    assert told["read_stock"] == "k0: 7 in stock" and "outcome_unknown" in told["delete_item"]
    assert transcript_problems(db_url, session) == []


def test_same_agent_under_dbos_durability_runs_both_again(db_url: str, tmp_path: Path) -> None:
    """The contrast in docs/pydantic-ai.md: the same agent and server under Pydantic AI's own
    DBOSDurability, killed the same way, runs the destructive tool twice and tells the model it
    succeeded once (DBOS steps are at-least-once; nothing records that a body started)."""
    pytest.importorskip("pydantic_ai.durable_exec.dbos")
    out = kill_mid_calls(db_url, tmp_path, "stdio", "dbos_durability_app")
    effects = out["effects"]
    assert out["output"] == "done"
    assert _bodies(effects) == Counter({"read_stock": 2, "delete_item": 2})
    model = read_effects(effects, "model")
    assert [m["step"] for m in model] == [0, 1]  # its model requests are DBOS steps too
    assert model[-1]["seen"] == {"read_stock": "k0: 7 in stock", "delete_item": "k1 deleted"}


def test_mcp_server_that_hangs_or_dies_gives_typed_errors(make_runtime: Any, tmp_path: Path) -> None:
    """A call that never answers and a server that dies mid-call each give the model a typed tool
    error within the agent's tool_timeout; the run goes on and completes."""
    effects = tmp_path / "effects"
    effects.mkdir()
    told: list[dict[str, str]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        told.append({p.tool_name: str(p.content) for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)})
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("hang", {"key": "h"}, "h1")])
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("die", {"key": "d"}, "d1")])
        return ModelResponse(parts=[TextPart("gave up")])

    agent = Agent(FunctionModel(reply), name="fragile", toolsets=[mcp_toolset("stdio", effects)])
    rt = make_runtime([hx.from_pydantic_ai(agent, tool_timeout=2.0)])
    started = time.monotonic()
    result = rt.start("fragile", "try").result(timeout=60)
    assert result.status == "completed" and result.output == "gave up"
    assert time.monotonic() - started < 120  # two tool timeouts plus a server start, on a busy machine
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    assert calls["hang"].status == "error" and calls["hang"].error["type"] == "ToolTimeoutError"
    assert calls["die"].status == "error" and calls["die"].error["type"] == "ToolServerError"
    assert "no answer within 2 s" in told[1]["hang"] and "unavailable" in told[2]["die"]
    assert _bodies(effects) == Counter({"hang": 1, "die": 1})
