"""An OpenAI Agents SDK agent's MCP server (the SDK's own ``MCPServerStdio`` and
``MCPServerStreamableHttp``), the app process SIGKILLed while both calls are in flight and relaunched:
``test_mcp.py``'s scenario and server, with ``tests/scenarios/oai_mcp_app.py`` as the app. What ran is
counted by the server's own side-effect file, with the dispatch id each call carried."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("agents")

from tests.processes.test_mcp import kill_mid_calls
from tests.support.crashkit import transcript_problems
from tests.support.effects import read_effects


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
