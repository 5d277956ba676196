"""The same agent as ``wire_app`` (same tools, same model class over HTTP to the test's provider),
under Pydantic AI's own DBOS integration (``DBOSDurability``), with its defaults.

    python -m tests.scenarios.dbos_wire_app --db URL --effects DIR --provider ROOT --wire chat [--live] [--step-tools] start|wake --session SID

The peer of the side-by-side table in docs/pydantic-ai.md ("Side by side over the wire"): killed
with a request in flight or mid-body, a stream cut, three 500s; what ran (``bodies.jsonl``) and
what its model was told (read at the provider). ``--live`` gives it an event stream handler, so
its model requests stream (as helix's ``live_output``). Its function tools run as workflow code,
as ``DBOSDurability`` leaves them; ``--step-tools`` makes each body a ``@DBOS.step`` (what its docs
suggest for a tool with side effects), run sequentially. Prints ``{"status", "output", "usage": [input, output]}`` (the run's usage as pydantic-ai sums it) or
``{"status": "failed", "error"}`` as a JSON line.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

from dbos import DBOS
from pydantic_ai.durable_exec.dbos import DBOSDurability

from tests.scenarios import wire_app


async def _consume(ctx: Any, events: AsyncIterable[Any]) -> None:
    async for _ in events:
        pass


def main(argv: list[str]) -> int:
    args = wire_app.parse(argv)
    wire_app.EFFECTS = Path(args.effects)
    DBOS(config={"name": "wire_contrast", "system_database_url": args.db, "application_version": "wire-contrast-1"})
    # Tool steps run in parallel start in no fixed order, and DBOS numbers steps as they start: a
    # replay may meet them in another order (DBOSUnexpectedStepError), so step tools run sequentially.
    mode: Any = "sequential" if args.step_tools else "parallel_ordered_events"
    durability = DBOSDurability(event_stream_handler=_consume if args.live else None, parallel_execution_mode=mode)
    wrap = DBOS.step() if args.step_tools else (lambda f: f)
    agent = wire_app.build_agent(args.wire, args.provider, capabilities=[durability], wrap=wrap)

    @DBOS.workflow(name="wire_contrast.run")
    async def run(prompt: str) -> dict[str, Any]:
        result = await agent.run(prompt)
        usage = result.usage()
        return {"output": result.output, "usage": [usage.input_tokens, usage.output_tokens]}

    return wire_app.serve_peer(args, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
