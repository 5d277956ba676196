"""Many runs, each cancelled by DBOS's own CLI (``dbos workflow cancel``) at a moment of its plan.

One process starts every session of the plan at once and waits for them all, so the test pays the
launch once and the runs' cancels land on a busy event loop, as they would in a worker. Where the
cancel lands is chosen by who spawns the CLI, from inside the run, so it is known:

- ``body``: the unsafe body spawns the CLI and waits for it to exit: the cancel has committed while
  the body runs (the next ledger transaction is the body's own result write, then the step commit);
- ``model0``: the first model request spawns it and waits: committed after the request's read,
  before its reply is recorded (the next transaction is the record, then the append);
- ``model1``: the same in the second request (the next is its record, then the step commit);
- ``loose``: the body spawns it and returns after ``sleep`` seconds without waiting: the cancel
  commits somewhere between mid-body and after the run's end (a cancel of a finished workflow is a
  no-op DBOS's CLI still exits 0 for).

    python -m tests.scenarios.cancel_race_app --db URL --effects DIR --executor ID --plan JSON

The plan is a JSON list of ``{"session", "mode", "sleep"}``; it prints one JSON line: each
session's run result. Effects (fsynced lines, ``effects.py``) carry the session id and a wall-clock
time: ``model`` per request, ``bodies`` per body start, ``cancels`` per CLI exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.threads import in_daemon_thread
from tests.scenarios import effects

EFFECTS = Path(".")
DB = ""
DBOS_CLI = str(Path(sys.executable).parent / "dbos")


def _cancel(run_id: str, session: str, where: str) -> dict[str, Any]:
    """DBOS's CLI, in a thread of its own (never the loop's executor, which the ledger's transactions use)."""
    proc = subprocess.run([DBOS_CLI, "workflow", "cancel", run_id, "-s", DB], capture_output=True, text=True, timeout=120)
    line = {"session": session, "run_id": run_id, "where": where, "code": proc.returncode, "t": time.time(), "stderr": proc.stderr[-500:]}
    effects.append(EFFECTS, "cancels", line)
    return line


def _current_run(session: str) -> str:
    from helix_dbos.ledger import tables as t
    from helix_dbos.ledger.engine import create_sync_engine

    engine = create_sync_engine(DB, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.select(t.sessions.c.current_run_id).where(t.sessions.c.session_id == session)).scalar_one())
    finally:
        engine.dispose()


def _plan_of(messages: list[ModelMessage]) -> dict[str, Any]:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    prompt = next(p for p in first.parts if isinstance(p, UserPromptPart))
    return dict(json.loads(str(prompt.content)))


async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    plan = _plan_of(messages)
    step = sum(isinstance(m, ModelResponse) for m in messages)
    effects.append(EFFECTS, "model", {"session": plan["session"], "step": step, "t": time.time()})
    if plan["mode"] == f"model{step}":
        run_id = await asyncio.to_thread(_current_run, plan["session"])
        await in_daemon_thread(_cancel, run_id, plan["session"], f"model{step}")
    if step == 0:
        return ModelResponse(parts=[TextPart("on it"), ToolCallPart("race_send", {"key": plan["session"]}, tool_call_id="call-0")])
    return ModelResponse(parts=[TextPart(f"done after {step} steps")])


PLANS: dict[str, dict[str, Any]] = {}
LOOSE: list[threading.Thread] = []  # joined before the result line: a CLI still running at exit would leave no ``cancels`` line


async def race_send(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """An unsafe tool: its body is where most of the plan's cancels are spawned."""
    plan = PLANS[key]
    effects.append(EFFECTS, "bodies", {"session": key, "dispatch_id": ctx.dispatch_id, "attempt": ctx.attempt, "t": time.time()})
    if plan["mode"] == "body":
        await in_daemon_thread(_cancel, ctx.run_id, key, "body")
    elif plan["mode"] == "loose":  # not awaited: it lands when it lands
        loose = threading.Thread(target=_cancel, args=(ctx.run_id, key, "loose"), daemon=True)
        LOOSE.append(loose)
        loose.start()
        await asyncio.sleep(float(plan["sleep"]))
    effects.append(EFFECTS, "body_ends", {"session": key, "t": time.time()})
    return {"sent": key}


def main(argv: list[str]) -> int:
    global EFFECTS, DB
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--plan", required=True)
    args = p.parse_args(argv)
    EFFECTS, DB = Path(args.effects), args.db
    EFFECTS.mkdir(parents=True, exist_ok=True)
    plan = json.loads(args.plan)
    PLANS.update({row["session"]: row for row in plan})
    agent = hx.Agent("racer", FunctionModel(reply), tools=[hx.tool(name="race_send")(race_send)])
    out: dict[str, Any] = {}
    with hx.Runtime([agent], database_url=args.db, executor_id=args.executor) as rt:
        handles = {row["session"]: rt.start("racer", json.dumps(row), session_id=row["session"]) for row in plan}
        for session, handle in handles.items():
            result = handle.result(timeout=180)
            out[session] = {"status": result.status, "error_code": result.error_code, "run_id": result.run_id,
                            "calls": [{"status": c.status, "attempts": len(c.attempts)} for c in rt.session(session).calls]}
    for loose in LOOSE:  # a loose cancel may outlive its run (a no-op DBOS's CLI still exits 0 for): wait for its line
        loose.join(timeout=150)
    print(json.dumps(out), flush=True)  # noqa: T201 - the result line the test reads
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
