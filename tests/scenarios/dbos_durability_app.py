"""The same pydantic-ai agent and MCP server as ``mcp_app``, under Pydantic AI's own ``DBOSDurability``.

    python -m tests.scenarios.dbos_durability_app --db URL --effects DIR --mcp stdio|URL start|wake --session SID

The contrast the docs' side-by-side table is measured from: killed mid-tool, what ran, what the model was told.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.models.function import FunctionModel

from tests.scenarios import mcp_app


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--mcp", required=True)
    p.add_argument("cmd", choices=["start", "wake"])
    p.add_argument("--session", required=True)
    args = p.parse_args(argv)
    mcp_app.EFFECTS = Path(args.effects)
    mcp_app.EFFECTS.mkdir(parents=True, exist_ok=True)
    DBOS(config={"name": "contrast", "system_database_url": args.db, "application_version": "contrast-1"})
    agent = Agent(FunctionModel(mcp_app.reply), name="stockist", toolsets=[mcp_app.mcp_toolset(args.mcp, mcp_app.EFFECTS)],
                  capabilities=[DBOSDurability()])

    @DBOS.workflow(name="contrast.run")
    async def run(prompt: str) -> str:
        return (await agent.run(prompt)).output

    DBOS.launch()  # a relaunch recovers the pending workflow here
    try:
        if args.cmd == "start":
            with SetWorkflowID(args.session):
                handle = DBOS.start_workflow(run, "clear k1")
        else:
            handle = DBOS.retrieve_workflow(args.session)
        print(json.dumps({"output": handle.get_result()}), flush=True)
    finally:
        DBOS.destroy(destroy_registry=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
