"""docs/openai-agents.md against the SDK's public exports and the adapter's code: every field of
``agents.Agent`` and every tool type of ``agents.Tool`` judged by the capability table and by
``features.py`` alike, each refused one built and seen refused, and the doc's example run as it is."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    AgentHooks,
    OpenAIChatCompletionsModel,
)
from openai import AsyncOpenAI

import helix_dbos as hx
from helix_dbos.adapters.openai_agents.features import AGENT_FIELDS, TOOL_TYPES
from helix_dbos.errors import UnsupportedFeatureError
from tests.support.procs import child_env
from tests.support.provider_server import Calls, Text, provider_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "openai-agents.md"


def _doc_table() -> dict[str, str]:
    body = DOC.read_text().split("<!-- capabilities-table -->", 1)[1].split("<!-- /capabilities-table -->", 1)[0]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        found = re.match(r"^\| `([\w.]+)` \| (.+) \|$", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def _tool_types() -> dict[str, type]:
    import agents

    out = {}
    for t in typing.get_args(agents.Tool):
        cls = typing.get_origin(t) or t
        out[cls.__name__] = cls
    return out


def test_the_table_and_the_code_judge_every_agent_field_and_tool_type_the_sdk_has() -> None:
    """An SDK release that adds an ``Agent`` field or a tool type fails here until both judge it."""
    fields = {f.name for f in dataclasses.fields(Agent)}
    assert fields == set(AGENT_FIELDS), f"features.AGENT_FIELDS judges {sorted(set(AGENT_FIELDS))}, the SDK has {sorted(fields)}"
    assert set(_tool_types()) == set(TOOL_TYPES), sorted(set(_tool_types()) ^ set(TOOL_TYPES))
    table = _doc_table()
    judged = {**{f"Agent.{k}": v for k, v in AGENT_FIELDS.items()}, **TOOL_TYPES}
    assert set(table) == set(judged), sorted(set(table) ^ set(judged))
    for name, verdict in table.items():
        runs = verdict.startswith("runs")
        assert runs or verdict.startswith("refused, because "), f"{name}: {verdict!r}"
        assert runs == (judged[name] is None), f"{name}: the table says {verdict!r}, the code {judged[name]!r}"


def _model() -> OpenAIChatCompletionsModel:
    return OpenAIChatCompletionsModel("m", openai_client=AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"))


def _refused_agents() -> dict[str, Agent[Any]]:
    values: dict[str, dict[str, Any]] = {
        "prompt": {"prompt": {"id": "pmpt_1"}},
        "hooks": {"hooks": AgentHooks()},
        "tool_use_behavior": {"tool_use_behavior": "stop_on_first_tool"},
    }
    assert set(values) == {k for k, v in AGENT_FIELDS.items() if v is not None}
    return {name: Agent(name="a", model=_model(), **kw) for name, kw in values.items()}


def test_each_refused_agent_field_is_refused_when_the_agent_is_read() -> None:
    for field, agent in _refused_agents().items():
        with pytest.raises(UnsupportedFeatureError, match=field):
            hx.from_openai_agents(agent)


def test_each_refused_tool_type_is_refused_when_the_agent_is_read() -> None:
    for name, cls in _tool_types().items():
        if TOOL_TYPES[name] is None:
            continue
        agent = Agent(name="a", model=_model(), tools=[object.__new__(cls)])  # the type is what is judged
        with pytest.raises(UnsupportedFeatureError, match=name):
            hx.from_openai_agents(agent)


def test_the_docs_example_runs_as_it_is(db_url: str, tmp_path: Path) -> None:
    """The doc's first code block, in a process of its own, against a loopback OpenAI-compatible
    server: the model checks the weather, books, answers; the booking is keyed on the dispatch id."""
    code = DOC.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    code += "\nimport json\nprint(json.dumps({'bookings': BOOKINGS}))\n"
    script = tmp_path / "example.py"
    script.write_text(code)
    with provider_server() as server:
        server.script(Calls([("weather", {"city": "Oslo"})]), Calls([("book", {"city": "Oslo"})]), Text("Booked: Oslo."))
        env = child_env(extra={"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test-key", "HELIX_DBOS_DATABASE_URL": db_url})
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        lines = out.stdout.strip().splitlines()
        assert lines[-2] == "completed Booked: Oslo.", out.stdout
        bookings = json.loads(lines[-1])["bookings"]
        assert list(bookings.values()) == ["Ann -> Oslo"] and len(next(iter(bookings))) == 32, bookings
        first = server.requests()[0].body
        assert first["messages"][0] == {"role": "system", "content": "You plan trips for Ann. Check the weather before booking."}
