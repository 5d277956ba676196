"""``Runtime.run_here``: the agent's own code runs on the caller's thread (or loop), as ``run_sync`` runs it.

pydantic-ai's ``agent.run_sync`` runs an agent's coroutines on the caller's thread, so examples such
as ``bank_support`` use a ``sqlite3`` connection opened there (``check_same_thread`` on) from their
async tools. Under ``start`` those run on DBOS's loop, another thread, and sqlite3 refuses; under
``run_here`` they run where the caller made the connection. Both databases.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx


def _model(tool: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(tool, {})])
        return ModelResponse(parts=[TextPart(f"got {returns[-1].content}")])

    return FunctionModel(reply)


def test_a_connection_opened_on_the_callers_thread_works_in_async_tools_and_instructions(make_runtime: Any) -> None:
    con = sqlite3.connect(":memory:")  # check_same_thread=True, sqlite3's default
    con.execute("CREATE TABLE customers(id, name, balance)")
    con.execute("INSERT INTO customers VALUES (123, 'John', 123.45)")
    agent = Agent(_model("balance"), name="bank")

    @agent.instructions
    async def customer(ctx: RunContext[Any]) -> str:
        return f"The customer is {con.execute('SELECT name FROM customers').fetchone()[0]}"

    @agent.tool_plain
    async def balance() -> str:
        return f"${con.execute('SELECT balance FROM customers WHERE id = 123').fetchone()[0]:.2f}"

    runtime = make_runtime([agent])
    here = runtime.run_here("bank", "What is my balance?", timeout=120)
    assert here.status == "completed" and here.output == "got $123.45", here
    # the same agent started the usual way runs its code on DBOS's loop: sqlite3 refuses the thread
    elsewhere = runtime.start("bank", "What is my balance?").result(timeout=120)
    assert elsewhere.status == "failed" and "thread" in (elsewhere.error or ""), elsewhere
    con.close()


def test_native_async_bodies_run_on_the_callers_thread_only_under_run_here(make_runtime: Any) -> None:
    seen: list[int] = []

    @hx.tool(replay="safe")
    async def where(ctx: hx.ToolContext) -> str:
        """Say which thread runs this body."""
        seen.append(threading.get_ident())
        return "here"

    runtime = make_runtime([hx.Agent(name="t", model=_model("where"), tools=[where])])
    assert runtime.run_here("t", "go", timeout=120).status == "completed"
    assert runtime.start("t", "go").result(timeout=120).status == "completed"
    assert seen[0] == threading.get_ident() and seen[1] != threading.get_ident(), seen


def test_run_here_async_runs_bodies_on_the_callers_loop(make_runtime: Any) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    @hx.tool(replay="safe")
    async def where(ctx: hx.ToolContext) -> str:
        """Say which loop runs this body."""
        loops.append(asyncio.get_running_loop())
        return "here"

    runtime = make_runtime([hx.Agent(name="t", model=_model("where"), tools=[where])])

    async def main() -> tuple[str, asyncio.AbstractEventLoop]:
        result = await runtime.run_here_async("t", "go", timeout=120)
        return result.status, asyncio.get_running_loop()

    status, caller = asyncio.run(main())
    assert status == "completed" and loops == [caller]
