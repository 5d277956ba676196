"""A real application process whose agent is a plain pydantic-ai agent with an MCP server toolset.

    python -m tests.scenarios.mcp_app --db URL --effects DIR --executor ID --mcp stdio|URL start --session SID
    python -m tests.scenarios.mcp_app ... wake --session SID

The model's first reply calls the server's read-only ``read_stock`` and destructive ``delete_item``;
the server counts its own bodies (``mcp_bodies.jsonl``), the model its requests (``model.jsonl``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

HERE = Path(__file__).resolve().parent
EFFECTS: Path = Path(".")


def effect(kind: str, **data: Any) -> None:
    """Append one fsynced line: the test's own record of what really happened."""
    effects.append(EFFECTS, kind, data)


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    seen = {p.tool_name: str(p.content) for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)}
    effect("model", step=n, seen=seen, tools=sorted(t.name for t in info.function_tools))
    if n == 0:
        return ModelResponse(parts=[ToolCallPart("read_stock", {"key": "k0"}, "c0"), ToolCallPart("delete_item", {"key": "k1"}, "c1")])
    return ModelResponse(parts=[TextPart("done")])


def mcp_toolset(where: str, effects: Path) -> Any:
    from pydantic_ai.mcp import MCPToolset

    if where == "stdio":
        from fastmcp.client.transports import StdioTransport

        transport = StdioTransport(sys.executable, [str(HERE / "mcp_server.py"), "--effects", str(effects), "stdio"], env=dict(os.environ))
        return MCPToolset(transport, id="inventory")
    return MCPToolset(where, id="inventory")


def main(argv: list[str]) -> int:
    global EFFECTS
    args = effects.app_args(argv, "--mcp")
    EFFECTS = Path(args.effects)
    agent = Agent(FunctionModel(reply), name="stockist", toolsets=[mcp_toolset(args.mcp, EFFECTS)])
    rt = hx.Runtime([agent], database_url=args.db, executor_id=args.executor).launch()
    try:
        if args.cmd == "start":
            print(json.dumps({"started": rt.start("stockist", "clear k1", session_id=args.session).run_id}), flush=True)
            result = rt.wait(args.session, timeout=60)
        else:
            result = rt.wait(args.session, timeout=60)
        view = rt.session(result.session_id)
        out = {
            "status": result.status,
            "output": result.output,
            "calls": [{"tool": c.tool_name, "status": c.status, "replay": c.replay, "attempts": len(c.attempts), "result": c.result, "error": c.error} for c in view.calls],
        }
        print(json.dumps(out), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
