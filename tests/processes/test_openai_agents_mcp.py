"""An OpenAI Agents SDK agent's MCP server (the SDK's own ``MCPServerStdio`` and
``MCPServerStreamableHttp``), the app process SIGKILLed while both calls are in flight and relaunched:
``test_mcp.py``'s scenario and server, with ``tests/scenarios/oai_mcp_app.py`` as the app. What ran is
counted by the server's own side-effect file, with the dispatch id each call carried."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("agents")

from tests.processes.test_mcp import _http_server, kill_mid_calls
from tests.support.crashkit import transcript_problems
from tests.support.effects import read_effects
from tests.support.procs import child_env, run_module


@pytest.mark.kills
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sigkill_mid_mcp_calls_of_an_sdk_agent(db_url: str, tmp_path: Path, transport: str) -> None:
    """The destructive call (no annotation makes it safe) is answered outcome_unknown and its body ran
    once; the read-only one (readOnlyHint) runs again with the same dispatch id, received by the
    server both times; the saved reply is never asked for again."""
    out = kill_mid_calls(db_url, tmp_path, transport, "oai_mcp_app")
    effects = out["effects"]

    assert (out["status"], out["output"]) == ("completed", "done"), out
    ran = read_effects(effects, "mcp_bodies")
    calls = {c["tool"]: c for c in out["calls"]}
    assert Counter(b["tool"] for b in ran) == Counter({"read_stock": 2, "delete_item": 1}), (ran, calls)  # the server's own count
    assert (calls["read_stock"]["replay"], calls["read_stock"]["status"], calls["read_stock"]["attempts"]) == ("safe", "ok", 2)
    assert (calls["delete_item"]["replay"], calls["delete_item"]["status"], calls["delete_item"]["attempts"]) == ("unsafe", "outcome_unknown", 1)
    by_tool: dict[str, set[str]] = {}
    for b in ran:
        by_tool.setdefault(b["tool"], set()).add(b["dispatch_id"])
    assert by_tool == {"read_stock": {calls["read_stock"]["dispatch_id"]}, "delete_item": {calls["delete_item"]["dispatch_id"]}}
    model = read_effects(effects, "model")
    assert [m["step"] for m in model] == [0, 1]  # the saved reply was never asked for again
    assert {"read_stock", "delete_item"} <= set(model[0]["tools"])
    told = model[1]["seen"]
    assert "k0: 7 in stock" in told["read_stock"] and "outcome_unknown" in told["delete_item"]
    assert transcript_problems(db_url, out["session"]) == []


def test_an_sse_servers_tools_run_through_the_ledger(make_runtime: Any, tmp_path: Path) -> None:
    """The SDK's ``MCPServerSse`` against the scenario server over SSE: its tools offered, each call
    answered once with its policy from the annotations and the dispatch id received by the server."""
    from agents import Agent
    from agents.mcp import MCPServerSse

    from helix_dbos.adapters.openai_agents.mcp import close_servers
    from tests.scenarios import oai_mcp_app
    from tests.scenarios.oai_mcp_app import Script

    effects = tmp_path / "effects"
    effects.mkdir()
    oai_mcp_app.EFFECTS = effects  # the scripted model records its requests beside the server's bodies
    proc, url = _http_server(effects, "sse")
    try:
        agent = Agent(name="sse_stockist", model=Script(), mcp_servers=[MCPServerSse(params={"url": url}, name="inventory",
                                                                                       client_session_timeout_seconds=120)])
        rt = make_runtime([agent])
        result = rt.start("sse_stockist", "clear k1").result(timeout=120)
        assert (result.status, result.output) == ("completed", "done"), result
        calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
        assert {n: (c.status, c.replay, len(c.attempts)) for n, c in calls.items()} == {
            "read_stock": ("ok", "safe", 1), "delete_item": ("ok", "unsafe", 1)}
        ran = read_effects(effects, "mcp_bodies")
        assert sorted((b["tool"], b["dispatch_id"]) for b in ran) == sorted((n, c.dispatch_id) for n, c in calls.items())
    finally:
        close_servers()
        proc.terminate()  # the server is done with, not crashed
        proc.wait(30)


@pytest.mark.kills
def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    """A process forked after the adapter connected a stdio server (a worker pool's fork) lists the
    server over a connection of its own, started in the child, rather than hang on the parent's loop
    thread, which the child does not have. The forking process is an app of its own
    (tests/scenarios/oai_mcp_fork_app.py): forking the pytest worker also forked whatever threads
    the worker's earlier tests left running."""
    effects = tmp_path / "effects"
    effects.mkdir()
    done = run_module("tests.scenarios.oai_mcp_fork_app", [str(effects)], child_env(), timeout=300)
    assert done.code == 0 and done.result is not None, done.stderr[-3000:]
    seen = done.result
    assert {"read_stock", "delete_item"} <= set(seen["parent_tools"]) and seen["parent_down"] == []
    assert seen["child_exit"] == 0, seen
    child = seen["child"]
    assert {"read_stock", "delete_item"} <= set(child["tools"]) and child["down"] == [] and child["answer"] == "f: 7 in stock"
    assert seen["parent_answer"] == "p: 7 in stock"
    ran = {b["key"]: b["pid"] for b in read_effects(effects, "mcp_bodies")}
    assert set(ran) == {"f", "p"} and ran["f"] != ran["p"]  # two server processes: the child started its own
