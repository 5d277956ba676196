"""Parents, children and humans in real processes: the scenario app of the sub-agent, approval,
client-tool and stop tests.

Every agent is defined here once, so the test process, a parent process and a worker process run the
same code on the same database. Effects are counted outside the runtime in fsynced append-only
files under ``--effects`` (one JSON line per body start and per model request, with the pid that
did it). A tool or a model *holds* while the file ``hold_<key>`` exists in the effects folder, which
lets a test kill or stop a process at a known point without sleeping on a guess.

    python -m tests.scenarios.family --db URL --effects DIR --executor ID [--no-serve] start --agent A --message M --session S
    python -m tests.scenarios.family ... wake --session S        # relaunch: DBOS recovers this executor's runs
    python -m tests.scenarios.family ... serve                   # a worker: serves the queue until stop_worker exists
    python -m tests.scenarios.family ... retry|resume|stop|approve|submit --session S [...]

Each command prints one JSON line (the run result, its pending calls and the session's calls).
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pydantic
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS: Path = Path(os.environ.get("FAMILY_EFFECTS", "."))


def effect(kind: str, **data: Any) -> None:
    """Append one fsynced line: the test's own record of what really happened, and where."""
    effects.append(EFFECTS, kind, {**data, "pid": os.getpid()})


async def hold(key: str) -> None:
    """Wait while ``hold_<key>`` exists: the test's handle on a body or a model request in flight."""
    while (EFFECTS / f"hold_{key}").exists():
        await asyncio.sleep(0.02)


# --- conversation helpers ---------------------------------------------------------------------------


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]


def steps_in_turn(messages: list[ModelMessage]) -> int:
    """Model replies since the latest user prompt: which step of the current turn this request is."""
    n = 0
    for m in reversed(messages):
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts):
            return n
        n += isinstance(m, ModelResponse)
    return n


def returns(messages: list[ModelMessage]) -> list[Any]:
    last = messages[-1]
    return [p.content for p in getattr(last, "parts", []) if isinstance(p, ToolReturnPart)]


def scripted(name: str, plan: Any) -> FunctionModel:
    """A model whose reply is ``plan(messages)``; every request is logged as a ``model`` effect."""

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        effect("model", agent=name, step=steps_in_turn(messages), prompts=prompts(messages), seen=returns(messages))
        await hold(f"model_{name}")
        out = plan(messages)
        if isinstance(out, str):
            return ModelResponse(parts=[TextPart(out)])
        return ModelResponse(parts=list(out))

    return FunctionModel(reply)


# --- tools ---------------------------------------------------------------------------------------------


def body(name: str, replay: str = "unsafe", **options: Any) -> hx.Tool:
    async def run(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        effect("bodies", tool=name, key=key, session=ctx.session_id, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt)
        await hold(key)
        return {"tool": name, "key": key}

    run.__name__ = name
    run.__doc__ = f"The {name} tool."
    return hx.tool(name=name, replay=replay, **options)(run)  # type: ignore[arg-type]


async def _wire(ctx: hx.ToolContext, amount: int, to: str) -> dict[str, Any]:
    """Wire money to someone."""
    effect("bodies", tool="wire", key=f"{to}:{amount}", session=ctx.session_id, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt)
    return {"wired": amount, "to": to}


wire = hx.tool(name="wire", requires_approval=lambda args: args["amount"] > 100)(_wire)
purge = body("purge", requires_approval=True)
note = body("note", replay="safe")
dig = body("dig")
peek = body("peek")
ponder = body("ponder", replay="safe")
slow = body("slow", sequential=True)
after = body("after", sequential=True)


class Question(pydantic.BaseModel):
    question: str


ask_user = hx.client_tool(name="ask_user", description="Ask the user a question.", input_schema=Question)


class Finding(pydantic.BaseModel):
    topic: str
    digs: int


# --- children --------------------------------------------------------------------------------------


def _researcher(messages: list[ModelMessage]) -> Any:
    topic = prompts(messages)[-1]
    if topic == "explode":
        raise RuntimeError("the researcher's model is down")
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("dig", {"key": topic}, "r1")]
    return [ToolCallPart("final_result", {"topic": topic, "digs": 1}, "r2")]


researcher = hx.Agent("researcher", scripted("researcher", _researcher), tools=[dig], output_type=Finding)


def _scout(messages: list[ModelMessage]) -> Any:
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("peek", {"key": prompts(messages)[-1]}, "s1")]
    return f"scouted {prompts(messages)[-1]}"


scout = hx.Agent("scout", scripted("scout", _scout), tools=[peek])


def _pal(messages: list[ModelMessage]) -> Any:
    said = prompts(messages)
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("ponder", {"key": said[-1]}, "p1")]
    return f"pal turn {len(said)}: {said[-1]} (remembers {', '.join(said[:-1]) or 'nothing'})"


pal = hx.Agent("pal", scripted("pal", _pal), tools=[ponder])


# --- parents ---------------------------------------------------------------------------------------


def delegating(tool_name: str) -> Any:
    """Each word of the user's message is one call to ``tool_name``, one per step; then a summary."""

    def plan(messages: list[ModelMessage]) -> Any:
        words = prompts(messages)[-1].split()
        k = steps_in_turn(messages)
        if k < len(words):
            return [ToolCallPart(tool_name, {"message": words[k]}, f"d{k}")]
        return "boss got " + json.dumps(returns(messages))

    return plan


remote_boss = hx.Agent("remote_boss", scripted("remote_boss", delegating("subagent__researcher")),
                       sub_agents=[hx.remote_agent(researcher, description="Research a topic.")])
local_boss = hx.Agent("local_boss", scripted("local_boss", delegating("subagent__scout")), sub_agents=[hx.local_agent(scout)])
pal_boss = hx.Agent("pal_boss", scripted("pal_boss", delegating("subagent__pal")), sub_agents=[hx.companion_agent(pal)])


def _approver(messages: list[ModelMessage]) -> Any:
    if steps_in_turn(messages) == 0:
        return [
            ToolCallPart("wire", {"amount": 500, "to": "ann"}, "a1"),
            ToolCallPart("wire", {"amount": 50, "to": "bob"}, "a2"),
            ToolCallPart("purge", {"key": "old"}, "a3"),
        ]
    return "approver saw " + json.dumps(returns(messages))


approver = hx.Agent("approver", scripted("approver", _approver), tools=[wire, purge])


def _clienty(messages: list[ModelMessage]) -> Any:
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("ask_user", {"question": "favourite colour?"}, "c1"), ToolCallPart("note", {"key": "n1"}, "c2")]
    return "clienty saw " + json.dumps(returns(messages))


clienty = hx.Agent("clienty", scripted("clienty", _clienty), tools=[ask_user, note])


def _stopper(messages: list[ModelMessage]) -> Any:
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("slow", {"key": "slow1"}, "t1"), ToolCallPart("after", {"key": "after1"}, "t2")]
    return "stopper finished " + json.dumps(returns(messages))


stopper = hx.Agent("stopper", scripted("stopper", _stopper), tools=[slow, after])


def _waiter(messages: list[ModelMessage]) -> Any:
    if steps_in_turn(messages) == 0:
        return [ToolCallPart("after", {"key": "waited"}, "w1")]
    return "waiter finished " + json.dumps(returns(messages))


waiter = hx.Agent("waiter", scripted("waiter", _waiter), tools=[after])  # its model request holds on model_waiter

AGENTS = [remote_boss, local_boss, pal_boss, approver, clienty, stopper, waiter]


def agents() -> list[Any]:
    """``AGENTS`` for the SDK the test chose (``SCENARIO_SDK``, set by the ``scenario_sdk`` fixture
    and inherited by every process it starts): with ``openai_agents`` the approval, client-tool and
    stop agents are OpenAI Agents SDK agents (``family_sdk.py``)."""
    if os.environ.get("SCENARIO_SDK", "pydantic_ai") == "openai_agents":
        from tests.scenarios import family_sdk

        return family_sdk.agents(sys.modules[__name__])
    return list(AGENTS)


# --- the process -------------------------------------------------------------------------------------


def report(rt: hx.Runtime, result: hx.RunResult | None, session_id: str | None = None, **extra: Any) -> dict[str, Any]:
    sid = result.session_id if result else session_id
    view = rt.session(sid) if sid else None
    return {
        "pid": os.getpid(),
        "status": result.status if result else None,
        "output": result.output if result else None,
        "run_id": result.run_id if result else None,
        "session_id": sid,
        "error_code": result.error_code if result else None,
        "pending": [{"dispatch_id": p.dispatch_id, "tool_name": p.tool_name, "kind": p.kind, "args": p.args} for p in (result.pending if result else [])],
        "calls": [
            {"tool": c.tool_name, "kind": c.kind, "status": c.status, "attempts": len(c.attempts), "dispatch_id": c.dispatch_id,
             "result": c.result, "error": c.error, "note": c.note, "child_session_id": c.child_session_id, "step": c.step}
            for c in (view.calls if view else [])
        ],
        **extra,
    }


def main(argv: list[str]) -> int:
    global EFFECTS
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--no-serve", action="store_true", help="do not dequeue children or companions")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--agent", required=True)
    s.add_argument("--message", required=True)
    s.add_argument("--session", required=True)
    sub.add_parser("serve")
    for name in ("wake", "retry", "resume", "stop", "approve", "submit"):
        c = sub.add_parser(name)
        c.add_argument("--session", required=True)
        c.add_argument("--dispatch")
        c.add_argument("--kind", default="interrupt")
        c.add_argument("--approved", type=int, default=1)
        c.add_argument("--reason")
        c.add_argument("--actor")
        c.add_argument("--result")
        c.add_argument("--error")
    args = p.parse_args(argv)
    EFFECTS = Path(args.effects)
    EFFECTS.mkdir(parents=True, exist_ok=True)
    rt = hx.Runtime(agents(), database_url=args.db, executor_id=args.executor, serve_queue=not args.no_serve).launch()
    try:
        out: dict[str, Any]
        if args.cmd == "serve":
            stop = {"now": False}
            signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
            print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
            while not stop["now"] and not (EFFECTS / "stop_worker").exists():
                time.sleep(0.05)
            return 0
        if args.cmd == "start":
            out = report(rt, rt.start(args.agent, args.message, session_id=args.session).result(timeout=90))
        elif args.cmd == "wake":
            out = report(rt, rt.wait(args.session, timeout=90))
        elif args.cmd == "retry":
            out = report(rt, rt.retry(args.session).result(timeout=90))
        elif args.cmd == "resume":
            out = report(rt, rt.resume(args.session).result(timeout=90))
        elif args.cmd == "stop":  # --session may list several sessions, comma-separated
            out = {"pid": os.getpid(), "stops": [dataclasses.asdict(rt.stop(sid, kind=args.kind)) for sid in args.session.split(",")]}
        else:
            if args.cmd == "approve":
                receipt = rt.approve(args.session, args.dispatch, approved=bool(args.approved), reason=args.reason, actor=args.actor)
            else:
                result = json.loads(args.result) if args.result is not None else None
                receipt = rt.submit_tool_result(args.session, args.dispatch, result=result, error=args.error)
            final = receipt.run.result(timeout=90) if receipt.run is not None else None
            out = report(rt, final, args.session, remaining=receipt.remaining)
        print(json.dumps(out), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
