"""``GET /agents`` shows every tool of a pydantic-ai agent with its policy before any run has listed
them, a real MCP server's tools over stdio included, and says which server could not be listed."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("fastmcp")

from fastapi.testclient import TestClient  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

import helix_dbos as hx  # noqa: E402
from helix_dbos.service.app import create_app  # noqa: E402
from tests.scenarios.mcp_app import HERE  # noqa: E402
from tests.support.procs import free_port  # noqa: E402


def _dead_url() -> str:
    """A loopback port nothing listens on: an MCP server that is down."""
    return f"http://127.0.0.1:{free_port()}/mcp"


def _never_asked(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("not asked")])


def test_agents_lists_every_tool_with_its_policy_before_any_run(db_url: str, tmp_path: Path) -> None:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    effects = tmp_path / "effects"
    effects.mkdir()
    stdio = MCPToolset(StdioTransport(sys.executable, [str(HERE / "mcp_server.py"), "--effects", str(effects), "stdio"],
                                      env=dict(os.environ)), id="inventory", init_timeout=60)  # a busy machine starts it slowly
    down = MCPToolset(_dead_url(), id="warehouse")
    extra = FunctionToolset(id="extra")

    @extra.tool_plain(sequential=True)
    def audit(note: str) -> str:
        """Write an audit note."""
        return note

    agent = Agent(FunctionModel(_never_asked), name="stockist", toolsets=[stdio, down, extra])

    @agent.tool_plain
    def ping() -> str:
        """A plain tool with no policy anywhere: unsafe."""
        return "pong"

    @agent.tool_plain(metadata={"replay": "safe", "concurrency_group": "notes"})
    def note(text: str) -> str:
        """A tool whose metadata gives its policy."""
        return text

    runtime = hx.Runtime([agent], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}",
                         tool_policies={"stockist": {"delete_item": {"requires_approval": True}}})
    with TestClient(create_app(runtime), base_url="http://localhost") as http:
        response = http.get("/agents")
        assert response.status_code == 200, response.text
        (shown,) = response.json()
        tools = {t["name"]: t for t in shown["tools"]}
        assert set(tools) == {"ping", "note", "audit", "read_stock", "delete_item", "hang", "die"}, sorted(tools)
        assert (tools["ping"]["replay"], tools["ping"]["concurrency_group"]) == ("unsafe", None)
        assert (tools["note"]["replay"], tools["note"]["concurrency_group"]) == ("safe", "notes")
        assert tools["audit"]["sequential"] is True
        assert tools["read_stock"]["replay"] == "safe"  # the server's readOnlyHint
        assert (tools["delete_item"]["replay"], tools["delete_item"]["requires_approval"]) == ("unsafe", True)  # the mapping
        (unlisted,) = shown["unlisted"]  # the server that is down is named, with why
        assert "warehouse" in unlisted["toolset"] and "failed to connect" in unlisted["error"], unlisted
        assert not runtime.agents["stockist"].tools  # what a run offers is never taken from the catalog

        again = http.get("/agents").json()[0]  # the listings are kept: the down server is asked again
        assert {t["name"] for t in again["tools"]} == set(tools) and len(again["unlisted"]) == 1
