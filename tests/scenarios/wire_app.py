"""A real application process whose pydantic-ai agent's model is one of pydantic-ai's own model
classes over HTTP (``OpenAIChatModel``, ``OpenAIResponsesModel``, ``AnthropicModel``), pointed at the
loopback provider the test runs (``tests/support/provider_server.py``), under helix.

    python -m tests.scenarios.wire_app --db URL --effects DIR --executor ID --provider ROOT --wire chat start --session SID
    python -m tests.scenarios.wire_app ... wake --session SID          (the relaunch: recovery runs)
    python -m tests.scenarios.wire_app ... --sdk openai_agents ...     (the agent as an OpenAI Agents SDK agent)

The provider's replies are scripted by the test; this app only offers two tools: ``charge`` (unsafe,
pydantic-ai's default) and ``lookup`` (``replay="safe"``). Each body appends a line to
``bodies.jsonl`` in the effects folder as it starts (the count outside the runtime); ``charge``
then blocks while ``hold_charge`` exists there, for a test to kill the process mid-body. Prints the
run's status, output, error code and its calls as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent

import helix_dbos as hx
from tests.scenarios import effects
from tests.support.provider_server import model_at

EFFECTS: Path = Path(".")


def retries() -> hx.ModelRetries:
    """Small delays: the test waits for what the provider does, not for the default backoff."""
    return hx.ModelRetries(attempts=3, first_delay=0.2, backoff=2.0, jitter=0.2)


def build_agent(wire: str, provider: str, capabilities: list[Any] | None = None,
                wrap: Callable[[Callable[..., str]], Callable[..., str]] = lambda f: f) -> Agent[None, str]:
    """The agent both this app and the Pydantic AI DBOS peer (``dbos_wire_app``, which adds its
    ``DBOSDurability`` capability) run; ``wrap`` decorates each tool body (the peer's ``@DBOS.step``)."""
    agent: Agent[None, str] = Agent(model_at(wire, provider), name="cashier", instructions="Charge the card, then say done.",
                                    capabilities=capabilities)

    def charge(card: str, amount: int) -> str:
        effects.append(EFFECTS, "bodies", {"tool": "charge", "pid": os.getpid()})
        while (EFFECTS / "hold_charge").exists():  # the test kills the process here
            time.sleep(0.05)
        return f"charged {amount} to {card}"

    def lookup(card: str) -> str:
        effects.append(EFFECTS, "bodies", {"tool": "lookup", "pid": os.getpid()})
        return f"{card}: active"

    agent.tool_plain(wrap(charge))
    agent.tool_plain(metadata={"replay": "safe"})(wrap(lookup))
    return agent


def build_sdk_agent(wire: str, provider: str) -> Any:
    """The same agent as an OpenAI Agents SDK ``agents.Agent`` (``--sdk openai_agents``): the SDK's own
    ``OpenAIChatCompletionsModel`` / ``OpenAIResponsesModel`` on the wire, the same two tool bodies
    (``charge`` unsafe by default, ``lookup`` declared safe with ``hx.openai_policy``)."""
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="test-key", base_url=f"{provider}/v1")
    model = OpenAIChatCompletionsModel("gpt-4o", openai_client=client) if wire == "chat" else OpenAIResponsesModel("gpt-4o", openai_client=client)

    @function_tool
    def charge(card: str, amount: int) -> str:
        """Charge a card."""
        effects.append(EFFECTS, "bodies", {"tool": "charge", "pid": os.getpid()})
        while (EFFECTS / "hold_charge").exists():  # the test kills the process here
            time.sleep(0.05)
        return f"charged {amount} to {card}"

    @hx.openai_policy(replay="safe")
    @function_tool
    def lookup(card: str) -> str:
        """Look a card up."""
        effects.append(EFFECTS, "bodies", {"tool": "lookup", "pid": os.getpid()})
        return f"{card}: active"

    return SdkAgent(name="cashier", model=model, instructions="Charge the card, then say done.", tools=[charge, lookup])


def serve_peer(args: argparse.Namespace, run: Callable[[str], Any]) -> int:
    """A peer app's process (DBOS configured, ``run`` its workflow): launch (a relaunch recovers the
    pending workflow here), ``start`` the session's workflow or ``wake`` to wait for the recovered
    one, and print its outcome as one JSON line: ``{"status": "completed", ...what it returned}`` or
    ``{"status": "failed", "error"}`` (the peer's failure is the measurement)."""
    from dbos import DBOS, SetWorkflowID

    DBOS.launch()
    try:
        if args.cmd == "start":
            with SetWorkflowID(args.session):
                handle = DBOS.start_workflow(run, "charge card c1 5")
        else:
            handle = DBOS.retrieve_workflow(args.session)
        try:
            out: dict[str, Any] = {"status": "completed", **handle.get_result()}
        except Exception as exc:  # noqa: BLE001 - the peer's failure is the measurement
            out = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    finally:
        DBOS.destroy(destroy_registry=True)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    for name in ("--db", "--effects", "--provider", "--wire"):
        p.add_argument(name, required=True)
    p.add_argument("--executor", default=None)
    p.add_argument("--live", action="store_true")
    p.add_argument("--step-tools", action="store_true")  # the peer only: each tool body a @DBOS.step
    p.add_argument("--sdk", default="pydantic_ai", choices=["pydantic_ai", "openai_agents"])
    p.add_argument("cmd", choices=["start", "wake"])
    p.add_argument("--session", required=True)
    args = p.parse_args(argv)
    Path(args.effects).mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str]) -> int:
    global EFFECTS
    args = parse(argv)
    EFFECTS = Path(args.effects)
    if args.sdk == "openai_agents":
        agent = hx.from_openai_agents(build_sdk_agent(args.wire, args.provider), model_retries=retries())
    else:
        agent = hx.from_pydantic_ai(build_agent(args.wire, args.provider), model_retries=retries())
    rt = hx.Runtime([agent], database_url=args.db, executor_id=args.executor, live_output=args.live).launch()
    try:
        if args.cmd == "start":
            print(json.dumps({"started": rt.start("cashier", "charge card c1 5", session_id=args.session).run_id}), flush=True)
        result = rt.wait(args.session, timeout=120)
        view = rt.session(result.session_id)
        out = {
            "status": result.status, "output": result.output, "error_code": result.error_code, "run_id": result.run_id,
            "calls": {c.tool_name: {"status": c.status, "replay": c.replay, "attempts": len(c.attempts)} for c in view.calls},
        }
        print(json.dumps(out), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
