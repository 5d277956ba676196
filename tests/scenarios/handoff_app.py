"""A real application process running OpenAI Agents SDK agents that hand off or call an agent tool,
their SDK model (``OpenAIChatCompletionsModel``) pointed at the loopback provider the test runs.

    python -m tests.scenarios.handoff_app --db URL --effects DIR --provider ROOT --wire chat --executor ID --shape handoff start --session SID
    python -m tests.scenarios.handoff_app ... wake --session SID          (the relaunch: recovery runs)

``--shape handoff``: ``triage`` (instructions "You are triage.") hands off to ``cashier``.
``--shape agent_tool``: ``boss`` (instructions "You lead.") offers ``cashier.as_tool(tool_name="ask_cashier")``.
``cashier`` (instructions "Charge the card, then say done.") has ``charge`` (unsafe, the default),
whose body appends a line to ``bodies.jsonl`` in the effects folder as it starts (the count outside
the runtime), then blocks while ``hold_charge`` exists there, for a test to kill the process
mid-body. Prints the run's status, output, error code and every call of the session and of its
children as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS: Path = Path(".")


def build(shape: str, provider: str) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    model = OpenAIChatCompletionsModel("gpt-4o", openai_client=AsyncOpenAI(api_key="test-key", base_url=f"{provider}/v1"))

    @function_tool
    def charge(card: str, amount: int) -> str:
        """Charge a card."""
        effects.append(EFFECTS, "bodies", {"tool": "charge", "pid": os.getpid()})
        while (EFFECTS / "hold_charge").exists():  # the test kills the process here
            time.sleep(0.05)
        return f"charged {amount} to {card}"

    cashier = Agent(name="cashier", model=model, instructions="Charge the card, then say done.", tools=[charge])
    if shape == "handoff":
        return Agent(name="triage", model=model, instructions="You are triage.", handoffs=[cashier])
    return Agent(name="boss", model=model, instructions="You lead.",
                 tools=[cashier.as_tool(tool_name="ask_cashier", tool_description="Ask the cashier to charge a card.")])


def calls_of(rt: hx.Runtime, session_id: str) -> list[dict[str, Any]]:
    """Every call of the session, then of its children's sessions, with its attempts."""
    out: list[dict[str, Any]] = []
    for c in rt.session(session_id).calls:
        out.append({"tool": c.tool_name, "kind": c.kind, "status": c.status, "attempts": len(c.attempts), "result": c.result,
                    "run_id": c.run_id, "step": c.step})
        if c.child_session_id is not None:
            out.extend({**d, "child": True} for d in calls_of(rt, c.child_session_id))
    return out


def main(argv: list[str]) -> int:
    global EFFECTS
    p = argparse.ArgumentParser()
    for name in ("--db", "--effects", "--provider", "--wire", "--executor", "--shape"):
        p.add_argument(name, required=True)
    p.add_argument("cmd", choices=["start", "wake"])
    p.add_argument("--session", required=True)
    args = p.parse_args(argv)
    EFFECTS = Path(args.effects)
    EFFECTS.mkdir(parents=True, exist_ok=True)
    agent = hx.from_openai_agents(build(args.shape, args.provider),
                                  model_retries=hx.ModelRetries(attempts=3, first_delay=0.2, backoff=2.0, jitter=0.2))
    rt = hx.Runtime([agent], database_url=args.db, executor_id=args.executor).launch()
    try:
        if args.cmd == "start":
            started = rt.start(agent.name, "charge card c1 5", session_id=args.session).run_id
            print(json.dumps({"started": started}), flush=True)  # noqa: T201 - the test reads the process's stdout
        result = rt.wait(args.session, timeout=120)
        out = {"status": result.status, "output": result.output, "error_code": result.error_code, "run_id": result.run_id,
               "calls": calls_of(rt, result.session_id)}
        print(json.dumps(out), flush=True)  # noqa: T201 - the test reads the process's stdout
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
