"""pydantic-ai's own examples, unchanged but for their models, run under ``hx.Runtime`` (both databases).

The examples run in a child process (``tests/scenarios/examples_app.py`` says how each model is
swapped and why a child; ``sql_gen`` runs on Postgres only, whose database its output validator
queries): no ``name=`` is added (names are inferred from the module variables),
their ``Caching()`` capabilities stay, ``flight_booking``'s union outputs and output validator run.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import child_env, run_module
from tests.scenarios import pydantic_ai_examples

EXAMPLES = Path(pydantic_ai_examples.__file__).parent


def test_the_examples_are_the_released_files() -> None:
    for name, (digest, size) in pydantic_ai_examples.RECORD.items():
        data = (EXAMPLES / name).read_bytes()
        ours = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (ours, len(data)) == (digest, size), f"{name} differs from pydantic-ai-examples {pydantic_ai_examples.VERSION}"


def test_every_example_of_the_wheel_is_run_or_says_why_not() -> None:
    """Each ``.py`` at the wheel's top level is run here unchanged (its released bytes, above) or
    named with what it needs that a test cannot have (a network service, a dataset, a terminal)."""
    shipped = {n for n in pydantic_ai_examples.WHEEL_TOP_LEVEL if n.endswith(".py") or "." not in n}
    accounted = set(pydantic_ai_examples.RECORD) | set(pydantic_ai_examples.NOT_RUN) | set(pydantic_ai_examples.NOT_RUN_PACKAGES)
    assert shipped == accounted
    assert all((EXAMPLES / name).is_file() for name in pydantic_ai_examples.RECORD)


@pytest.mark.parametrize("example", ["pydantic_model", "stream_markdown", "stream_whales", "chat_app", "medical_agent_delegation"])
def test_more_examples_run_with_only_the_model_swapped(db_url: str, example: str) -> None:
    """One example a process (three bind their agent to ``agent``), run as its ``__main__`` runs it:
    ``run_here``, its agent code on the caller's thread; TestModel calls every tool, then the output tool."""
    outcome = run_module("tests.scenarios.examples_more_app", ["--db", db_url, "--example", example], child_env(), timeout=240)
    assert outcome.code == 0 and outcome.result is not None, outcome.stderr[-3000:]
    report = outcome.result
    assert report["status"] == "completed", report
    if example == "pydantic_model":
        assert report["name"] == "agent" and set(report["output"]) == {"city", "country"}
    elif example == "stream_whales":  # a list of TypedDicts: the output tool's schema with root $defs
        assert report["name"] == "agent" and isinstance(report["output"], list), report
        assert all({"name", "length", "width", "weight", "ocean", "description"} >= set(w) for w in report["output"]), report
    elif example in ("stream_markdown", "chat_app"):
        assert report["name"] == "agent" and isinstance(report["output"], str) and report["calls"] == []
    else:  # the triage agent's two tools each ran a specialist with pydantic-ai's own agent.run
        assert report["name"] == "triage_agent"
        calls = {c["tool"]: c for c in report["calls"] if c["kind"] == "tool"}
        assert set(calls) == {"consult_specialist", "consult_senior_doctor"}, report["calls"]
        assert all(c["status"] == "ok" for c in calls.values()), calls
        assert calls["consult_specialist"]["result"]["final_status"] == "resolved_by_specialist"
        assert calls["consult_senior_doctor"]["result"]["final_status"] == "escalated"


def _calls(report: dict[str, Any], label: str) -> list[tuple[str, str, str]]:
    return [(c["tool"], c["kind"], c["status"]) for c in report[label]["calls"]]


def test_examples_run_with_only_the_model_swapped(db_url: str) -> None:
    postgres = db_url.startswith("postgresql")  # sql_gen's validator EXPLAINs its query: it needs Postgres
    outcome = run_module("tests.scenarios.examples_app", ["--db", db_url, *(["--pg", db_url] if postgres else [])], child_env(), timeout=240)
    assert outcome.code == 0 and outcome.result is not None, outcome.stderr[-3000:]
    report = outcome.result
    names = ["roulette_agent", "search_agent", "seat_preference_agent", "support_agent", "weather_agent"]
    assert report["names"] == sorted([*names, *(["agent"] if postgres else [])])  # sql_gen's agent is `agent`

    bank = report["bank_support"]  # TestModel: calls the tool, then the output tool with generated values
    assert bank["status"] == "completed", bank
    assert set(bank["output"]) == {"support_advice", "block_card", "risk"}
    assert bank["calls"][0]["tool"] == "customer_balance" and bank["calls"][0]["result"] == "$123.45"

    roulette = report["roulette_wheel"]
    assert roulette["status"] == "completed" and roulette["output"] is True, roulette
    assert roulette["calls"][0]["result"] == "winner"

    weather = report["weather_agent"]  # both tools answered through the mock transport
    assert weather["status"] == "completed", weather
    results = {c["tool"]: c["result"] for c in weather["calls"]}
    assert results == {"get_lat_lng": {"lat": 51.5, "lng": -0.1}, "get_weather": {"temperature": "21 °C", "description": "Sunny"}}

    flight = report["flight_booking"]  # union output, its validator rejecting the first offer, a nested agent.run
    assert flight["status"] == "completed", flight
    assert flight["output"] == {"flight_number": "LA101", "price": 250, "origin": "SFO", "destination": "ANC", "date": "2025-01-10"}
    extracted = flight["calls"][0]
    assert extracted["tool"] == "extract_flights" and len(extracted["result"]) == 3
    rejected = flight["calls"][1]
    assert rejected["error"] == {"code": "output_rejected", "message": "Flight should have destination ANC, not FAI"}

    seat = report["seat_preference"]
    assert seat["status"] == "completed" and seat["output"] == {"row": 1, "seat": "A"}, seat

    if postgres:  # union output; its validator rejects a query that is not a SELECT, EXPLAINs the next
        sql = report["sql_gen"]
        assert sql["status"] == "completed", sql
        assert sql["output"] == {"sql_query": "SELECT * FROM records WHERE level = 'error'", "explanation": "the error records"}
        assert [c["error"]["message"] for c in sql["calls"] if c["error"]] == ["Please create a SELECT query"]
