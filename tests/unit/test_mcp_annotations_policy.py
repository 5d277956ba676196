"""An MCP tool's annotations mean the same replay policy whichever adapter's client listed it: the
pydantic-ai ``MCPToolset``'s metadata dict and the OpenAI Agents SDK's ``ToolAnnotations`` model
(snake_case attributes since MCP SDK v2) go through the one rule in ``adapters/mcp_tools.py``."""

from __future__ import annotations

from typing import Any

import pytest
from agents.mcp import MCPServerStdio, MCPUtil
from mcp_types import Tool as McpTool
from mcp_types import ToolAnnotations
from pydantic_ai.tools import ToolDefinition

from helix_dbos.adapters.mcp_tools import looks_like_transport, replay_from_annotations
from helix_dbos.adapters.openai_agents.tools import resolve
from helix_dbos.adapters.pydantic_ai.agent import resolve_policy

CASES: list[tuple[dict[str, Any] | None, str]] = [
    ({"readOnlyHint": True}, "safe"),
    ({"idempotentHint": True, "destructiveHint": True}, "safe"),
    ({"readOnlyHint": False, "destructiveHint": True}, "unsafe"),
    ({"destructiveHint": False}, "unsafe"),  # not destructive is not repeatable
    ({}, "unsafe"),
    (None, "unsafe"),
]


@pytest.mark.parametrize(("hints", "replay"), CASES)
def test_both_adapters_derive_the_same_replay_from_the_same_annotations(hints: dict[str, Any] | None, replay: str) -> None:
    assert replay_from_annotations(hints) == replay
    assert replay_from_annotations(ToolAnnotations(**hints) if hints is not None else None) == replay

    pydantic_policy, source = resolve_policy(ToolDefinition(name="t", metadata={"annotations": hints}), "mcp", None)
    assert (pydantic_policy["replay"], source) == (replay, "mcp_annotations")

    listed = McpTool(name="t", input_schema={"type": "object", "properties": {}},
                     annotations=ToolAnnotations(**hints) if hints is not None else None)
    sdk_tool = MCPUtil.to_function_tool(listed, MCPServerStdio(params={"command": "true"}, name="s"), False)
    sdk_policy, sdk_source = resolve(sdk_tool, None)
    assert (sdk_policy["replay"], sdk_source) == (replay, "mcp_annotations")


def test_the_mapping_wins_over_the_annotations_under_both_adapters() -> None:
    pydantic_policy, source = resolve_policy(ToolDefinition(name="t", metadata={"annotations": {"readOnlyHint": True}}), "mcp", {"replay": "unsafe"})
    assert (pydantic_policy["replay"], source) == ("unsafe", "mapping")
    listed = McpTool(name="t", input_schema={"type": "object", "properties": {}}, annotations=ToolAnnotations(read_only_hint=True))
    sdk_tool = MCPUtil.to_function_tool(listed, MCPServerStdio(params={"command": "true"}, name="s"), False)
    sdk_policy, sdk_source = resolve(sdk_tool, {"replay": "unsafe"})
    assert (sdk_policy["replay"], sdk_source) == ("unsafe", "mapping")


def test_a_server_failing_is_told_from_a_call_failing() -> None:
    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as inner:
            raise ValueError("while calling") from inner
    except ValueError as outer:
        assert looks_like_transport(outer)
    assert not looks_like_transport(ValueError("bad argument"))
