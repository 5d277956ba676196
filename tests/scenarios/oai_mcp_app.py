"""A real application process whose agent is an OpenAI Agents SDK agent with an MCP server.

    python -m tests.scenarios.oai_mcp_app --db URL --effects DIR --executor ID --mcp stdio|URL start --session SID
    python -m tests.scenarios.oai_mcp_app ... wake --session SID

``mcp_app``'s scenario with the SDK's own server classes (``MCPServerStdio``, or
``MCPServerStreamableHttp`` for a URL) on an ``agents.Agent``: the scripted model's first reply calls
the server's read-only ``read_stock`` and destructive ``delete_item``; the server counts its own
bodies, with the dispatch id each call carried (``mcp_bodies.jsonl``), the model its requests
(``model.jsonl``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import helix_dbos as hx
from tests.scenarios import effects

HERE = Path(__file__).resolve().parent
EFFECTS: Path = Path(".")


def effect(kind: str, **data: Any) -> None:
    """Append one fsynced line: the test's own record of what really happened."""
    effects.append(EFFECTS, kind, data)


def text(value: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(type="message", id="msg", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=value, annotations=[])])


def call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=json.dumps(args), id=f"fc-{call_id}",
                                    status="completed")


class Script(Model):
    """Stateless: its reply is a function of the items it is sent (how many replies they hold)."""

    model = "scripted"

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,
                           handoffs: Any, tracing: Any, *, previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        seen = {i["call_id"]: str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}
        n = 1 if seen else 0
        told = {"read_stock": seen.get("c0"), "delete_item": seen.get("c1")}
        effect("model", step=n, seen={k: v for k, v in told.items() if v is not None}, tools=sorted(t.name for t in tools))
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        if n == 0:
            return ModelResponse(output=[call("read_stock", {"key": "k0"}, "c0"), call("delete_item", {"key": "k1"}, "c1")], usage=usage,
                                 response_id=None)
        return ModelResponse(output=[text("done")], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def mcp_servers(where: str, effects_dir: Path) -> list[Any]:
    """The SDK's own server classes for ``where``: ``stdio``, the scenario server as a child process;
    a URL, two ``MCPServerStreamableHttp`` on it, one per tool (``tool_filter``), because the SDK sends
    one streamable-HTTP server's requests one at a time and the scenario needs both calls in flight."""
    from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, create_static_tool_filter

    if where == "stdio":
        return [MCPServerStdio(params={"command": sys.executable, "args": [str(HERE / "mcp_server.py"), "--effects", str(effects_dir), "stdio"],
                                       "env": dict(os.environ)}, name="inventory", client_session_timeout_seconds=120)]
    return [MCPServerStreamableHttp(params={"url": where}, name=f"inventory-{tool}", client_session_timeout_seconds=120,
                                    tool_filter=create_static_tool_filter(allowed_tool_names=[tool])) for tool in ("read_stock", "delete_item")]


def main(argv: list[str]) -> int:
    global EFFECTS
    args = effects.app_args(argv, "--mcp")
    EFFECTS = Path(args.effects)
    agent = Agent(name="stockist", model=Script(), mcp_servers=mcp_servers(args.mcp, EFFECTS))
    rt = hx.Runtime([agent], database_url=args.db, executor_id=args.executor).launch()
    try:
        if args.cmd == "start":
            sys.stdout.write(json.dumps({"started": rt.start("stockist", "clear k1", session_id=args.session).run_id}) + "\n")
            sys.stdout.flush()
        result = rt.wait(args.session, timeout=120)
        view = rt.session(result.session_id)
        out = {
            "status": result.status,
            "output": result.output,
            "calls": [{"tool": c.tool_name, "status": c.status, "replay": c.replay, "attempts": len(c.attempts), "result": c.result,
                       "error": c.error, "dispatch_id": c.dispatch_id} for c in view.calls],
        }
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
