"""A small MCP server (the MCP SDK's FastMCP, named ``MCPServer`` since SDK v2) for the MCP tests.

One read-only tool, one destructive tool, each counting its own side effects in a fsynced file
outside the runtime (with the helix dispatch id the call carried in its ``_meta``, when a client
sends one), plus a tool that never answers and one that kills the server mid-call.

    python tests/scenarios/mcp_server.py --effects DIR stdio
    python tests/scenarios/mcp_server.py --effects DIR http --port N     # streamable HTTP on 127.0.0.1
    python tests/scenarios/mcp_server.py --effects DIR sse --port N      # SSE (/sse) on 127.0.0.1
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

EFFECTS = Path(".")
server = MCPServer("inventory")


def dispatch_of(ctx: Context | None) -> str | None:
    """The helix dispatch id the call carried in its ``_meta`` (the OpenAI Agents SDK adapter sends it)."""
    meta = (ctx.request_context.meta if ctx is not None else None) or {}
    return (meta.get("helix_dbos") or {}).get("dispatch_id")


def effect(tool: str, key: str, ctx: Context | None = None) -> None:
    with open(EFFECTS / "mcp_bodies.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool, "key": key, "pid": os.getpid(), "dispatch_id": dispatch_of(ctx)}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _pause() -> None:
    """Hold the call in flight while the test's ``hold`` file exists (so a kill lands mid-call)."""
    deadline = time.monotonic() + 60
    while (EFFECTS / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_stock(key: str, ctx: Context) -> str:
    """How many of an item are in stock."""
    effect("read_stock", key, ctx)
    _pause()
    return f"{key}: 7 in stock"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
def delete_item(key: str, ctx: Context) -> str:
    """Delete an item for good."""
    effect("delete_item", key, ctx)
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
    p.add_argument("transport", choices=["stdio", "http", "sse"])
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    EFFECTS = Path(args.effects)
    EFFECTS.mkdir(parents=True, exist_ok=True)
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "sse":
        server.run("sse", host="127.0.0.1", port=args.port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
