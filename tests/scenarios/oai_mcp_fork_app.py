"""A process that connected an SDK agent's stdio MCP server through the adapter, then forks (as a
worker pool forks): the child must list and call over a connection of its own, started in the
child, rather than wait on the parent's loop thread, which the child does not have.

``python -m tests.scenarios.oai_mcp_fork_app EFFECTS_DIR``: prints one JSON line, what the child and
the parent saw. Run in a process of its own, single-threaded until the adapter starts its loop, so
no other test's threads are forked with it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def main() -> None:
    from agents import Agent
    from agents.mcp import MCPServerStdio

    import helix_dbos as hx
    from helix_dbos.adapters.openai_agents.mcp import close_servers
    from tests.scenarios.oai_mcp_app import Script

    server_py = Path(__file__).resolve().parent / "mcp_server.py"
    effects = Path(sys.argv[1])
    server = MCPServerStdio(params={"command": sys.executable, "args": [str(server_py), "--effects", str(effects), "stdio"], "env": dict(os.environ)},
                            name="inventory", client_session_timeout_seconds=120)
    agent = hx.from_openai_agents(Agent(name="forked", model=Script(), mcp_servers=[server]))
    out: dict[str, Any] = {}
    try:
        tools, unlisted = asyncio.run(agent.catalog())
        out["parent_tools"], out["parent_down"] = sorted(t.name for t in tools), unlisted
        report = effects / "child.json"
        pid = os.fork()
        if pid == 0:  # the child: list again, over its own connection, and call a tool on it
            code = 1
            try:
                listed, down = asyncio.run(agent.catalog())
                # the parent's connection keepers, copied into the child and unreachable there, are
                # collected now, at the worst moment (each GC's timing is the allocator's otherwise)
                gc.collect()
                answer = asyncio.run(agent.lister.mcp_servers[0].call_tool("read_stock", {"key": "f"}))
                report.write_text(json.dumps({"tools": sorted(t.name for t in listed), "down": down, "answer": answer.content[0].text}))
                close_servers()
                code = 0
            except BaseException as exc:  # noqa: BLE001 - what the child met, for the test's message (os._exit prints nothing)
                report.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}))
            finally:
                os._exit(code)
        deadline = time.monotonic() + 120
        status: int | None = None
        while status is None and time.monotonic() < deadline:
            got, raw = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(raw) if got else None
            time.sleep(0.05)
        if status is None:  # hung on the parent's loop, which has no thread in the child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        out["child_exit"] = status
        out["child"] = json.loads(report.read_text()) if report.exists() else None
        mine = asyncio.run(agent.lister.mcp_servers[0].call_tool("read_stock", {"key": "p"}))  # the parent's connection still serves it
        out["parent_answer"] = mine.content[0].text
    finally:
        close_servers()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
