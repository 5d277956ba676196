"""A real application process whose model streams (for the live-output tests).

    python -m tests.scenarios.live_app --db URL --effects DIR --executor ID start|wake --session SID
    python -m tests.scenarios.live_app ... --provider http://127.0.0.1:PORT ...   (an OpenAI Agents SDK agent)

Runs with ``HELIX_DBOS_LIVE_OUTPUT=1``; ``model.jsonl`` counts the model requests really made. With
``--provider`` the agent is an ``agents.Agent`` whose ``OpenAIChatCompletionsModel`` streams from the
loopback provider there (``tests/support/provider_server.py``), which counts the requests instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS: Path | None = None  # set by main(); the CLI's build_runtime() counts nothing


def effect(kind: str, **data: object) -> None:
    """Append one fsynced line: the test's own record of what really happened."""
    effects.append(EFFECTS, kind, data)


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    effect("model", step=n, pid=os.getpid())
    if n == 0:
        yield "Looking "
        await asyncio.sleep(0.3)
        yield {1: DeltaToolCall(name="look", json_args='{"key": "a"}', tool_call_id="c1")}
        return
    for chunk in ["found ", "it"]:
        await asyncio.sleep(0.3)
        yield chunk


def build_runtime() -> hx.Runtime:
    """For the CLI (``HELIX_DBOS_APP=tests.scenarios.live_app:build_runtime``)."""

    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    return hx.Runtime([hx.Agent("live", FunctionModel(stream_function=stream), tools=[look])])


def main(argv: list[str]) -> int:
    global EFFECTS
    provider = None
    if "--provider" in argv:
        at = argv.index("--provider")
        provider, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    args = effects.app_args(argv)
    EFFECTS = Path(args.effects)

    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    agent: hx.Agent = hx.Agent("live", FunctionModel(stream_function=stream), tools=[look])
    if provider is not None:
        from agents import Agent, function_tool

        from tests.support.provider_server import sdk_model_at

        sdk_look = hx.openai_policy(function_tool(look.execute, name_override="look"), replay="safe")  # type: ignore[arg-type]
        agent = hx.from_openai_agents(Agent(name="live", model=sdk_model_at("chat", provider), tools=[sdk_look]))
    rt = hx.Runtime([agent], database_url=args.db, executor_id=args.executor).launch()
    try:
        if args.cmd == "start":
            print(json.dumps({"run_id": rt.start("live", "go", session_id=args.session).run_id}), flush=True)
        result = rt.wait(args.session, timeout=60)
        print(json.dumps({"status": result.status, "output": result.output, "run_id": result.run_id}), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
