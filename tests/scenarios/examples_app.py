"""pydantic-ai's own examples run under ``hx.Runtime`` with only their models swapped, in a child process.

    python -m tests.scenarios.examples_app --db URL

How the model is swapped: every agent the runtime runs is read inside ``agent.override(model=...)``
(pydantic-ai's own test idiom), so the runtime takes the overriding ``TestModel``/``FunctionModel``
as the agent's model; nothing else of the agent is touched. ``flight_booking``'s
``extraction_agent`` is not run by the runtime but by pydantic-ai's own ``agent.run`` inside the
``extract_flights`` tool body, in the workflow's own context, which an override held here does
not reach: its model is swapped with pydantic-ai's public setter (``agent.model = ...``). No agent is given ``name=``: the runtime
infers each from the module variable it is bound to, as pydantic-ai does. Their ``Caching()``
capabilities stay on. What the examples need from outside their model is given as their own
``__main__`` blocks give it: bank_support's module-level ``cur`` and an in-memory customers table;
weather's ``httpx.AsyncClient`` (here on an ``httpx.MockTransport``, the only other change of
behaviour: no network). Prints one JSON line with each run's output and its calls.

Run in a child process because ``weather_agent`` and ``flight_booking`` call
``logfire.configure(...)`` and ``logfire.instrument_pydantic_ai()`` at import, which set process-wide
tracing that the test runner's own tracing tests must not inherit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sqlite3
from typing import Any

import os

# pydantic-ai builds an agent's provider when the agent is constructed (at the examples' import), and
# a provider wants its API key then; the overriding models are what run, so these keys are never sent.
for _key in ("OPENAI_API_KEY", "GROQ_API_KEY", "GOOGLE_API_KEY"):
    os.environ.setdefault(_key, "unused-the-model-is-swapped")

import httpx  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

import helix_dbos as hx  # noqa: E402
from tests.scenarios.pydantic_ai_examples import bank_support, flight_booking, roulette_wheel, weather_agent  # noqa: E402


def _output_args(info: AgentInfo, value: dict[str, Any] | bool) -> tuple[str, dict[str, Any]]:
    """The output tool the runtime offered, and ``value`` shaped to its schema (a non-object rides in ``response``)."""
    tool = info.output_tools[0]
    props = tool.parameters_json_schema.get("properties", {})
    wrapped = list(props) == ["response"] and not (isinstance(value, dict) and set(value) <= {"response"})
    return tool.name, ({"response": value} if wrapped else value)  # type: ignore[dict-item]


def _returns(messages: list[ModelMessage]) -> dict[str, Any]:
    return {p.tool_name: p.content for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)}


def roulette_model() -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen = _returns(messages)
        if "roulette_wheel" not in seen:
            return ModelResponse(parts=[ToolCallPart("roulette_wheel", {"square": 18}, "r0")])
        name, args = _output_args(info, seen["roulette_wheel"] == "winner")
        return ModelResponse(parts=[ToolCallPart(name, args, "r1")])

    return FunctionModel(reply)


def search_model() -> FunctionModel:
    """Asks for the flights, offers a wrong one first (the example's output validator rejects it), then the right one."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen = _returns(messages)
        if "extract_flights" not in seen:
            return ModelResponse(parts=[ToolCallPart("extract_flights", {}, "s0")])
        flights = seen["extract_flights"]
        flights = json.loads(flights) if isinstance(flights, str) else flights
        wrong = next(f for f in flights if f["destination"] != "ANC")
        right = min((f for f in flights if f["origin"] == "SFO" and f["destination"] == "ANC" and f["date"] == "2025-01-10"),
                    key=lambda f: f["price"])
        name = info.output_tools[0].name
        offered = sum(isinstance(p, ToolCallPart) and p.tool_name == name for m in messages if isinstance(m, ModelResponse) for p in m.parts)
        name, args = _output_args(info, right if offered else wrong)
        return ModelResponse(parts=[ToolCallPart(name, args, f"s{len(messages)}")])

    return FunctionModel(reply)


def extraction_model() -> FunctionModel:
    """For pydantic-ai's own loop inside the tool body: the flights of the page as the output tool's argument."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        flights = [
            {"flight_number": "AK123", "price": 350, "origin": "SFO", "destination": "ANC", "date": "2025-01-10"},
            {"flight_number": "AK456", "price": 370, "origin": "SFO", "destination": "FAI", "date": "2025-01-10"},
            {"flight_number": "LA101", "price": 250, "origin": "SFO", "destination": "ANC", "date": "2025-01-10"},
        ]
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, {"response": flights}, "x0")])

    return FunctionModel(reply)


def seat_model() -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        name, args = _output_args(info, {"row": 1, "seat": "A"})
        return ModelResponse(parts=[ToolCallPart(name, args, "p0")])

    return FunctionModel(reply)


def sql_model() -> FunctionModel:
    """Offers a query that is not a SELECT first (the example's validator asks again), then one that
    Postgres can EXPLAIN against the example's own schema."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        name = info.output_tools[0].name
        offered = sum(isinstance(p, ToolCallPart) and p.tool_name == name for m in messages if isinstance(m, ModelResponse) for p in m.parts)
        query = "SELECT * FROM records WHERE level = 'error'" if offered else "DELETE FROM records"
        name, args = _output_args(info, {"sql_query": query, "explanation": "the error records"})
        return ModelResponse(parts=[ToolCallPart(name, args, f"q{offered}")])

    return FunctionModel(reply)


async def sql_schema(pg: str) -> None:
    """What sql_gen's own ``database_connect`` creates in a new database, created in the test's one."""
    import asyncpg

    from tests.scenarios.pydantic_ai_examples import sql_gen

    conn = await asyncpg.connect(pg)
    try:
        await conn.execute("CREATE TYPE log_level AS ENUM ('debug', 'info', 'warning', 'error', 'critical')")
        await conn.execute(sql_gen.DB_SCHEMA)
    finally:
        await conn.close()


def weather_transport() -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/latlng":
            return httpx.Response(200, json={"lat": 51.5, "lng": -0.1})
        if path == "/number":
            return httpx.Response(200, text="21")
        if path == "/weather":
            return httpx.Response(200, text="Sunny")
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def bank_deps(data: dict[str, Any]) -> Any:
    return bank_support.SupportDependencies(customer_id=data["customer_id"], db=bank_support.DatabaseConn(sqlite_conn=BANK[0]))


def flight_deps(data: dict[str, Any]) -> Any:
    return flight_booking.Deps(
        web_page_text=flight_booking.flights_web_page,
        req_origin=data["origin"],
        req_destination=data["destination"],
        req_date=datetime.date.fromisoformat(data["date"]),
    )


#: bank_support's connection, opened in ``main`` exactly as the example's own ``__main__`` opens it.
BANK: list[sqlite3.Connection] = []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--pg", help="a Postgres database for sql_gen's queries (sql_gen runs only with it)")
    args = parser.parse_args()
    # as bank_support's own __main__ does: an in-memory database on this thread (sqlite3's default
    # check_same_thread=True), its cursor bound to the module's `cur`
    with sqlite3.connect(':memory:') as con:
        cur = con.cursor()
        cur.execute('CREATE TABLE customers(id, name, balance)')
        cur.execute("""
            INSERT INTO customers VALUES
                (123, 'John', 123.45)
        """)
        con.commit()
        BANK.append(con)
        bank_support.cur = cur  # type: ignore[attr-defined]  # the example's __main__ binds it at module level
        run(args)


def run(args: argparse.Namespace) -> None:

    models = [
        (bank_support.support_agent, TestModel()),
        (roulette_wheel.roulette_agent, roulette_model()),
        (weather_agent.weather_agent, TestModel()),
        (flight_booking.search_agent, search_model()),
        (flight_booking.seat_preference_agent, seat_model()),
    ]
    # run by pydantic-ai's own agent.run inside a tool body, in the workflow's context, which an
    # override held here does not reach: its model is swapped with pydantic-ai's public setter
    flight_booking.extraction_agent.model = extraction_model()
    agents = [bank_support.support_agent, roulette_wheel.roulette_agent, weather_agent.weather_agent,
              flight_booking.search_agent, flight_booking.seat_preference_agent]
    factories: dict[str, Any] = {}
    if args.pg:
        import asyncio

        import asyncpg

        from tests.scenarios.pydantic_ai_examples import sql_gen

        asyncio.run(sql_schema(args.pg))
        models.append((sql_gen.agent, sql_model()))
        agents.append(sql_gen.agent)

        async def sql_deps(data: Any) -> Any:
            return sql_gen.Deps(conn=await asyncpg.connect(args.pg))

        factories["agent"] = sql_deps
    with contextlib.ExitStack() as stack:
        for agent, model in models:
            stack.enter_context(agent.override(model=model))
        runtime = hx.Runtime(
            agents,
            database_url=args.db,
            deps_factories={**factories,
                "support_agent": bank_deps,
                "roulette_agent": lambda data: roulette_wheel.Deps(**data),
                "weather_agent": lambda data: weather_agent.Deps(client=httpx.AsyncClient(transport=weather_transport())),
                "search_agent": flight_deps,
            },
        ).launch()
        try:
            starts = {
                "bank_support": ("support_agent", "What is my balance?", {"customer_id": 123}),
                "roulette_wheel": ("roulette_agent", "Put my money on square eighteen", {"winning_number": 18}),
                "weather_agent": ("weather_agent", "What is the weather like in London and in Wiltshire?", {}),
                "flight_booking": ("search_agent", "Find me a flight from SFO to ANC on 2025-01-10",
                                   {"origin": "SFO", "destination": "ANC", "date": "2025-01-10"}),
                "seat_preference": ("seat_preference_agent", "window seat in the front row please", None),
            }
            if args.pg:
                starts["sql_gen"] = ("agent", 'show me logs from yesterday, with level "error"', {})
            report: dict[str, Any] = {"names": sorted(runtime.agents) if hasattr(runtime, "agents") else None}
            for label, (agent_name, message, deps) in starts.items():
                # the examples' __main__ blocks call run_sync: their agent code runs on this thread
                result = runtime.run_here(agent_name, message, deps=deps, timeout=120)
                calls = runtime.reader.calls(session_id=result.session_id)
                report[label] = {
                    "status": result.status,
                    "error": result.error,
                    "output": result.output,
                    "calls": [{"tool": c["tool_name"], "kind": c["kind"], "status": c["status"], "result": c.get("result"),
                               "error": c.get("error")} for c in calls],
                }
            print(json.dumps(report, default=str), flush=True)
        finally:
            runtime.shutdown()


if __name__ == "__main__":
    main()
