"""The output tool helix sends is the one pydantic-ai sends for the same agent, and valid JSON Schema.

For every output type pydantic-ai supports and helix takes (a model, ``list[Model]``, a union, scalars,
a TypedDict, a dataclass, a dict, ``ToolOutput``), the ``final_result`` definition is compared with
the one a plain ``agent.run`` hands its model, checked as a Draft 2020-12 schema with every ``$ref``
resolvable inside it, compared again on the wire (what ``OpenAIChatModel``/``OpenAIResponsesModel``/
``AnthropicModel`` sent to a local provider, from plain pydantic-ai and from helix), and run to
completion with ``TestModel`` under ``hx.Runtime`` on both databases.

The one deliberate difference: a union ``A | B`` is one ``final_result`` tool whose ``response`` is
any member, where pydantic-ai offers one tool per member (``docs/pydantic-ai.md``); each member's
schema inside it is the one pydantic-ai sends for that member.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any, Literal

import pydantic
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.output import ToolOutput
from pydantic_ai.tools import ToolDefinition
from typing_extensions import TypedDict

import helix_dbos as hx
from tests.conftest import one_database
from tests.support.procs import child_env, run_module
from tests.support.provider_server import Calls, model_for, provider_server, tools_sent
from tests.support.schema_check import assert_self_contained


class Whale(pydantic.BaseModel):
    """A whale seen at sea."""

    name: str
    length: float = pydantic.Field(description="metres")
    ocean: Literal["atlantic", "pacific"] | None = None


class Fish(pydantic.BaseModel):
    species: str
    fins: int


class Pod(pydantic.BaseModel):
    whales: list[Whale]
    leader: Whale | None = None


class Colour(enum.Enum):
    red = "red"
    blue = "blue"


class Sighting(TypedDict):
    whale: Whale
    seen: datetime.date


@dataclasses.dataclass
class Catch:
    fish: Fish
    kilos: float


#: label -> output_type as given to pydantic-ai
OUTPUTS: dict[str, Any] = {
    "model": Whale,
    "nested_model": Pod,
    "list_of_models": list[Whale],
    "union": Whale | Fish,
    "optional_model": Whale | None,
    "int": int,
    "bool": bool,
    "float": float,
    "enum": Colour,
    "literal": Literal["yes", "no"],
    "list_of_str": list[str],
    "dict": dict[str, int],
    "typed_dict": Sighting,
    "dataclass": Catch,
    "tool_output": ToolOutput(Whale, description="Report the whale", strict=True),
    "tool_output_list": ToolOutput(list[Fish]),
}
UNIONS = {"union", "optional_model"}


def _pydantic_ai_output_tools(output_type: Any) -> list[ToolDefinition]:
    """The output tools a plain ``agent.run`` hands its model for this output type."""
    seen: list[AgentInfo] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        raise RuntimeError("only the request parameters are needed")

    with pytest.raises(RuntimeError):
        Agent(FunctionModel(model), output_type=output_type).run_sync("hi")
    return list(seen[0].output_tools)


def _helix_output_tool(output_type: Any, name: str = "schemas") -> ToolDefinition:
    definition = hx.from_pydantic_ai(Agent(TestModel(), output_type=output_type, name=name)).output_definition()
    assert definition is not None
    return definition


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return schema["$defs"][node["$ref"].split("/")[-1]]
    return node


@pytest.mark.parametrize("label", sorted(OUTPUTS))
def test_the_output_tool_is_pydantic_ais_and_valid_json_schema(label: str) -> None:
    output_type = OUTPUTS[label]
    ours = _helix_output_tool(output_type)
    theirs = _pydantic_ai_output_tools(output_type)
    assert_self_contained(ours.parameters_json_schema)
    for tool in theirs:
        assert_self_contained(tool.parameters_json_schema)
    assert ours.name == "final_result"
    if label not in UNIONS:
        assert len(theirs) == 1
        (it,) = theirs
        assert (ours.name, ours.description, ours.parameters_json_schema, ours.strict, ours.outer_typed_dict_key) == (
            it.name, it.description, it.parameters_json_schema, it.strict, it.outer_typed_dict_key)
        return
    # the deliberate difference: one tool, each member inside it as pydantic-ai sends that member
    # (pydantic-ai moves a member's docstring from its schema to its tool's description)
    schema = ours.parameters_json_schema
    members = [_resolve(schema, m) for m in schema["properties"]["response"]["anyOf"] if m != {"type": "null"}]
    none = {"properties": {"response": {"type": "null"}}, "required": ["response"], "type": "object"}
    theirs = [t for t in theirs if t.parameters_json_schema != none]  # None: the null member of our anyOf
    assert [t.parameters_json_schema for t in theirs] == [{k: v for k, v in m.items() if k != "description"} for m in members]
    for tool, member in zip(theirs, members, strict=True):
        if "description" in member:
            assert tool.description.endswith(member["description"])


@pytest.mark.parametrize("wire", ["chat", "responses"])
@one_database  # what is sent to the provider, built before the ledger is involved
def test_the_wire_carries_the_same_output_tool_as_plain_pydantic_ai(wire: str, make_runtime: Any) -> None:
    """What the provider receives from helix is what it receives from ``agent.run`` (non-union types)."""
    answers = {"list_of_models": {"response": [{"name": "moby", "length": 18.0}]}, "int": {"response": 3},
               "tool_output": {"name": "moby", "length": 18.0}, "dataclass": {"fish": {"species": "cod", "fins": 7}, "kilos": 2.5}}
    def with_tool(agent: Agent[Any, Any]) -> Agent[Any, Any]:
        @agent.tool_plain
        def log_sighting(pod: Pod, where: Literal["north", "south"], note: str | None = None) -> str:
            """Log a pod seen at sea."""
            return "logged"

        return agent

    with provider_server() as server:
        plain: dict[str, dict[str, Any]] = {}
        for label, args in answers.items():
            server.script(Calls([("final_result", args)]))
            with_tool(Agent(model_for(wire, server), output_type=OUTPUTS[label])).run_sync("go")
            plain[label] = tools_sent(server.requests()[-1])
            assert set(plain[label]) == {"log_sighting", "final_result"}
        agents = [with_tool(Agent(model_for(wire, server), output_type=OUTPUTS[label], name=f"wire_{label}")) for label in answers]
        rt = make_runtime(agents)
        for label, args in answers.items():
            server.script(Calls([("final_result", args)]))
            result = rt.start(f"wire_{label}", "go").result(timeout=120)
            assert result.status == "completed", result
            sent = tools_sent(server.requests()[-1])
            assert sent == plain[label], label  # the function tool (nested model in its arguments) too
            for tool in sent.values():
                assert_self_contained(tool["parameters"])


@one_database  # what is sent to the provider, built before the ledger is involved
def test_anthropic_gets_the_same_output_tool_as_plain_pydantic_ai(make_runtime: Any) -> None:
    """``AnthropicModel`` (streamed Messages API) with ``ToolOutput``: the tool, its schema and the
    output are pydantic-ai's, through helix as through ``agent.run``."""
    with provider_server() as server:
        answer = Calls([("final_result", {"response": [{"species": "cod", "fins": 7}]})])
        server.script(answer)
        plain_out = Agent(model_for("messages", server), output_type=OUTPUTS["tool_output_list"]).run_sync("go").output
        plain = tools_sent(server.requests()[-1])
        rt = make_runtime([Agent(model_for("messages", server), output_type=OUTPUTS["tool_output_list"], name="anthropic_out")])
        server.script(answer)
        result = rt.start("anthropic_out", "go").result(timeout=120)
        assert result.status == "completed", result
        assert result.output == [f.model_dump() for f in plain_out]
        assert tools_sent(server.requests()[-1]) == plain
        assert_self_contained(plain["final_result"]["parameters"])


@one_database  # the output schema TestModel is given, nothing the database keeps
def test_every_output_type_runs_with_test_model(make_runtime: Any) -> None:
    """``TestModel`` builds its answer from the schema sent; a dangling ``$ref`` was its ``KeyError``."""
    agents = [Agent(TestModel(), output_type=t, name=f"tm_{label}") for label, t in OUTPUTS.items()]
    rt = make_runtime(agents)
    handles = {label: rt.start(f"tm_{label}", "go") for label in OUTPUTS}
    for label, handle in handles.items():
        result = handle.result(timeout=120)
        assert result.status == "completed", (label, result)
        expected = OUTPUTS[label].output if isinstance(OUTPUTS[label], ToolOutput) else OUTPUTS[label]
        pydantic.TypeAdapter(expected).validate_python(result.output)


@one_database  # the example's output types through the model, nothing the database keeps
def test_flight_bookings_list_and_union_agents_run_with_test_model(db_url: str) -> None:
    """pydantic-ai's own ``flight_booking`` example (copied unchanged): its ``list[FlightDetails]`` and
    ``SeatPreference | Failed`` agents run under ``hx.Runtime`` with ``TestModel``, as with ``agent.run``.
    In a child process: the example configures logfire's process-wide tracing at import, which the
    tracing tests of this process must not inherit."""
    outcome = run_module("tests.scenarios.examples_more_app", ["--db", db_url, "--example", "flight_booking"], child_env(), timeout=240)
    assert outcome.code == 0 and outcome.result is not None, outcome.stderr[-3000:]
    for name, got in outcome.result.items():
        assert got["status"] == "completed", (name, got)
        assert got["output"] == got["plain"], name
