"""A fleet of real processes on one database: front ends that only enqueue, workers that run.

Workers are ``helix-dbos worker --app tests.scenarios.fleet_app:runtime`` (settings from the
environment below); the front end is this module's ``enqueue`` command, a ``Runtime(mode="client")``.
Bodies and model requests are counted outside the runtime (``FLEET_EFFECTS``, one fsynced line
each, with the pid that ran it), so a test can say which process ran what.

    python -m tests.scenarios.fleet_app --db URL enqueue --agent fleet --owner acme --count 6 --prefix s

Environment: ``FLEET_EFFECTS`` (folder), ``FLEET_DELAY`` (seconds a body takes, default 2),
``FLEET_MAX_RUNNING`` / ``FLEET_RATE`` (``n/period``) for agent ``capped``, ``FLEET_WORKER_CONCURRENCY``,
``FLEET_OWNER_SHARE``, ``FLEET_SYNC`` (bodies are sync functions that block their thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects


_record = effects.recorder("FLEET_EFFECTS")


def _slow(name: str) -> Any:
    async def body(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        _record("bodies", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, session_id=ctx.session_id)
        await asyncio.sleep(float(os.environ.get("FLEET_DELAY", "2")))
        _record("body_ends", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt)
        return {"tool": name, "key": key}

    def blocking(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        _record("bodies", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, session_id=ctx.session_id)
        time.sleep(float(os.environ.get("FLEET_DELAY", "2")))
        _record("body_ends", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt)
        return {"tool": name, "key": key}

    async def hogging(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        return blocking(ctx, key)  # a sync wait inside an async body: it blocks the event loop itself

    mode = os.environ.get("FLEET_SYNC")
    chosen = {"": body, "loop": hogging}.get(mode or "", blocking)  # FLEET_SYNC: a sync body, run in a thread
    chosen.__name__ = name
    chosen.__doc__ = f"The {name} tool: takes FLEET_DELAY seconds."
    return chosen


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    responses = sum(isinstance(m, ModelResponse) for m in messages)
    _record("model", step=responses)
    if responses == 0:
        return ModelResponse(parts=[TextPart("on it"), ToolCallPart("work", {"key": "w"}, tool_call_id="c-work"), ToolCallPart("send", {"key": "s"}, tool_call_id="c-send")])
    return ModelResponse(parts=[TextPart(f"done after {responses} steps")])


def _agent(name: str) -> hx.Agent:
    tools = [hx.tool(replay="safe", name="work")(_slow("work")), hx.tool(name="send")(_slow("send"))]
    return hx.Agent(name, FunctionModel(_reply), tools=tools)


def _limits() -> dict[str, hx.AgentLimits]:
    max_running = os.environ.get("FLEET_MAX_RUNNING")
    rate = os.environ.get("FLEET_RATE")
    requests = None
    if rate:
        n, _, period = rate.partition("/")
        requests = (int(n), float(period))
    return {"capped": hx.AgentLimits(max_running=int(max_running) if max_running else None, model_requests=requests)}


def runtime(mode: str | None = None, database_url: str | None = None) -> hx.Runtime:
    """The fleet's runtime: agents ``fleet`` (no limits) and ``capped`` (``FLEET_MAX_RUNNING``, ``FLEET_RATE``)."""
    concurrency = os.environ.get("FLEET_WORKER_CONCURRENCY")
    share = os.environ.get("FLEET_OWNER_SHARE")
    return hx.Runtime(
        [_agent("fleet"), _agent("capped")],
        limits=_limits(),
        database_url=database_url,
        worker_concurrency=int(concurrency) if concurrency else None,
        owner_share=int(share) if share else None,
        **({"mode": mode} if mode else {}),
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("enqueue", help="admit COUNT sessions through a front end (mode=client) and exit")
    e.add_argument("--agent", default="fleet")
    e.add_argument("--owner")
    e.add_argument("--count", type=int, default=1)
    e.add_argument("--prefix", required=True)
    e.add_argument("--then-owner", help="then one more session, `solo-0`, owned by this owner (same process, right after)")
    args = p.parse_args(argv)
    rt = runtime("client", args.db).launch()
    try:
        out: dict[str, Any] = {"pid": os.getpid(), "sessions": [], "statuses": [], "positions": [], "connections": rt.connection_footprint()}
        for i in range(args.count):
            handle = rt.start(args.agent, "go", session_id=f"{args.prefix}-{i}", owner=args.owner)
            out["sessions"].append(handle.session_id)
        if args.then_owner:
            out["sessions"].append(rt.start(args.agent, "go", session_id="solo-0", owner=args.then_owner).session_id)
        for sid in out["sessions"]:
            view = rt.session(sid)
            out["statuses"].append(view.status)
            out["positions"].append(view.queue_position)
        print(json.dumps(out), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
