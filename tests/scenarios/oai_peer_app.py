"""The cashier of ``wire_app`` written for OpenAI's Agents SDK, under its DBOS integration
(``dbos-openai-agents``'s ``DBOSRunner``), with its defaults: the peer an Agents SDK user would pick.

    python -m tests.scenarios.oai_peer_app --db URL --effects DIR --provider ROOT --wire chat|responses start|wake --session SID

Same two tools as ``wire_app`` (``charge``, which blocks while ``hold_charge`` exists in the effects
folder so a test can kill the process mid-body, and ``lookup``), each counting its bodies in
``bodies.jsonl``; the SDK's own ``OpenAIChatCompletionsModel`` or ``OpenAIResponsesModel`` over HTTP
to the test's provider. ``DBOSRunner`` makes each model request a ``@DBOS.step`` and leaves function
tools as workflow code (ordered by its turnstile). Prints ``{"status", "output", "usage": [input,
output]}`` or ``{"status": "failed", "error"}`` as a JSON line.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, Model, function_tool, set_tracing_disabled
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from dbos import DBOS
from dbos_openai_agents import DBOSRunner
from openai import AsyncOpenAI

from tests.scenarios import effects, wire_app

EFFECTS: Path = Path(".")


def model_at(wire: str, root: str) -> Model:
    """The SDK's own model class for ``wire``, its client pointed at the provider at ``root``."""
    client = AsyncOpenAI(api_key="test-key", base_url=f"{root}/v1")
    if wire == "responses":
        return OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    return OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)


@function_tool
def charge(card: str, amount: int) -> str:
    """Charge the card."""
    effects.append(EFFECTS, "bodies", {"tool": "charge", "pid": os.getpid()})
    while (EFFECTS / "hold_charge").exists():  # the test kills the process here
        time.sleep(0.05)
    return f"charged {amount} to {card}"


@function_tool
def lookup(card: str) -> str:
    """Look the card up."""
    effects.append(EFFECTS, "bodies", {"tool": "lookup", "pid": os.getpid()})
    return f"{card}: active"


def main(argv: list[str]) -> int:
    global EFFECTS
    args = wire_app.parse(argv)
    EFFECTS = Path(args.effects)
    set_tracing_disabled(True)  # no trace export to OpenAI's servers from a test
    agent = Agent(name="cashier", instructions="Charge the card, then say done.", tools=[charge, lookup], model=model_at(args.wire, args.provider))
    DBOS(config={"name": "oai_contrast", "system_database_url": args.db, "application_version": "oai-contrast-1"})

    @DBOS.workflow(name="oai_contrast.run")
    async def run(prompt: str) -> dict[str, Any]:
        result = await DBOSRunner.run(agent, prompt)
        usage = result.context_wrapper.usage
        return {"output": result.final_output, "usage": [usage.input_tokens, usage.output_tokens]}

    return wire_app.serve_peer(args, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
