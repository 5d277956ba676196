"""A small MCP server (the MCP SDK's FastMCP, named ``MCPServer`` since SDK v2) for the MCP tests.

One read-only tool, one destructive tool, each counting its own side effects in a fsynced file
outside the runtime, plus a tool that never answers and one that kills the server mid-call.

    python tests/scenarios/mcp_server.py --effects DIR stdio
    python tests/scenarios/mcp_server.py --effects DIR http --port N     # streamable HTTP on 127.0.0.1
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

EFFECTS = Path(".")
server = MCPServer("inventory")


def effect(tool: str, key: str) -> None:
    with open(EFFECTS / "mcp_bodies.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool, "key": key, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _pause() -> None:
    """Hold the call in flight while the test's ``hold`` file exists (so a kill lands mid-call)."""
    deadline = time.monotonic() + 60
    while (EFFECTS / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_stock(key: str) -> str:
    """How many of an item are in stock."""
    effect("read_stock", key)
    _pause()
    return f"{key}: 7 in stock"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
def delete_item(key: str) -> str:
    """Delete an item for good."""
    effect("delete_item", key)
    _pause()
    return f"{key} deleted"


@server.tool()
async def hang(key: str) -> str:
    """Never answers (the server itself stays responsive)."""
    import anyio

    effect("hang", key)
    await anyio.sleep(3600)
    return "never"


@server.tool()
def die(key: str) -> str:
    """Kills the server while the call is in flight."""
    effect("die", key)
    os._exit(3)


def main() -> None:
    global EFFECTS
    p = argparse.ArgumentParser()
    p.add_argument("--effects", required=True)
    p.add_argument("transport", choices=["stdio", "http"])
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    EFFECTS = Path(args.effects)
    EFFECTS.mkdir(parents=True, exist_ok=True)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
