"""Many runs on a worker whose ledger pool has one connection, with a short ``store_retry_window``.

    python -m tests.scenarios.pool_wait_app --db URL --effects DIR --runs N --hold S --body S

Everything runs in one process with ``tx_pool=(1, 0)``: every ledger transaction of every run
waits its turn for the one connection. ``--hold``: the app itself checks that connection out and
keeps it for S seconds while the runs go, in turns of 2 s with a moment's release between them
(longer than the window and the one-second floor of a try's wait on the server), so the runs'
transactions, the reads retried within the window included, wait in the pool longer than the
window, with the database answering all along. ``--body``: each run's tool sleeps S seconds (a
test cuts the database while one is in flight). Prints one JSON line: each session's result.
Effects (``effects.py``): ``bodies`` per body start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS = Path(".")
BODY_S = 0.0


async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if sum(isinstance(m, ModelResponse) for m in messages) == 0:
        return ModelResponse(parts=[ToolCallPart("note", {"text": "x"}, tool_call_id="c0")])
    return ModelResponse(parts=[TextPart("done")])


async def note(ctx: hx.ToolContext, text: str) -> str:
    """A safe tool: records its start, then takes ``--body`` seconds."""
    effects.append(EFFECTS, "bodies", {"run_id": ctx.run_id, "t": time.time()})
    await asyncio.sleep(BODY_S)
    return text


def main(argv: list[str]) -> int:
    global EFFECTS, BODY_S
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--body", type=float, default=0.0)
    args = p.parse_args(argv)
    EFFECTS, BODY_S = Path(args.effects), args.body
    EFFECTS.mkdir(parents=True, exist_ok=True)
    agent = hx.Agent("pooled", FunctionModel(reply), tools=[hx.tool(name="note", replay="safe")(note)])
    out: dict[str, Any] = {}
    with hx.Runtime([agent], database_url=args.db, executor_id="pool-wait", tx_pool=(1, 0)) as rt:
        held = threading.Event()

        def hold() -> None:  # the pool's only connection, busy for --hold seconds in turns of 2 s
            until = time.monotonic() + args.hold
            while time.monotonic() < until:
                with rt._launched.runner.tx_engine.connect() as conn:  # type: ignore[union-attr]  # the pool the runs use
                    conn.execute(sa.text("SELECT 1"))
                    held.set()
                    time.sleep(min(2.0, max(until - time.monotonic(), 0.0)))
                time.sleep(0.05)  # a few waiters get their turn

        holder = threading.Thread(target=hold, daemon=True)
        if args.hold:
            holder.start()
            held.wait(60)
        started = time.monotonic()
        handles = [rt.start("pooled", f"run {i}") for i in range(args.runs)]
        for handle in handles:
            result = handle.result(timeout=300)
            out[result.session_id] = {"status": result.status, "error_code": result.error_code, "run_id": result.run_id}
        if args.hold:
            holder.join(timeout=60)
        out["_elapsed"] = {"status": "info", "error_code": None, "run_id": str(round(time.monotonic() - started, 2))}
    print(json.dumps(out), flush=True)  # noqa: T201 - the result line the test reads
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
