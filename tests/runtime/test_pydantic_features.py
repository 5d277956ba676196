"""What of a pydantic-ai agent is read and what is refused: capabilities (checked against
pydantic-ai's own list and docs/pydantic-ai.md's table), output types, and the inferred name."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.adapters.pydantic_ai.capabilities import VERDICTS
from helix_dbos.errors import ConfigurationError, UnsupportedFeatureError
from tests.conftest import one_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "pydantic-ai.md"


def _doc_table() -> dict[str, str]:
    text = DOC.read_text()
    body = text.split("<!-- capabilities-table -->", 1)[1].split("<!-- /capabilities-table -->", 1)[0]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        found = re.match(r"^\| `(\w+)` \| (.+) \|$", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def test_capabilities_table_judges_every_capability_pydantic_ai_lists() -> None:
    """A pydantic-ai release that adds a capability fails here until the table and the code judge it."""
    from pydantic_ai.capabilities import CAPABILITY_TYPES

    table = _doc_table()
    missing = sorted(set(CAPABILITY_TYPES) - set(table))
    assert not missing, f"docs/pydantic-ai.md's capabilities table does not judge {missing}"
    unjudged = sorted(set(CAPABILITY_TYPES) - set(VERDICTS))
    assert not unjudged, f"pydantic_capabilities.VERDICTS does not judge {unjudged}"
    assert set(table) == set(VERDICTS), "the table and the code judge different capabilities"
    for name, verdict in table.items():
        runs = verdict.startswith("runs under the contract")
        assert runs or verdict.startswith("refused, because "), f"{name}: {verdict!r}"
        assert runs == (VERDICTS[name] is None), f"{name}: the table says {verdict!r}, the code {VERDICTS[name]!r}"


def _model() -> FunctionModel:
    return FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")]))


def _instances(tmp_path: Path) -> dict[str, Any]:
    """One instance of every capability pydantic-ai lists; those that need arguments get small real ones."""
    from pydantic_ai.capabilities import CAPABILITY_TYPES, Caching
    from pydantic_ai.native_tools import WebSearchTool

    needs: dict[str, Callable[[Any], Any]] = {
        "FileUnderstanding": lambda cls: cls(TestModel()),
        "LocalWorkspace": lambda cls: cls(tmp_path),
        "WindowsWorkspace": lambda cls: cls(tmp_path),
        "MCP": lambda cls: cls("http://127.0.0.1:9/mcp", native=True),
        "ModelFallback": lambda cls: cls(TestModel()),
        "NativeTool": lambda cls: cls(WebSearchTool()),
        "PrefixTools": lambda cls: cls(Caching(), "p"),
    }
    made: dict[str, Any] = {}
    for name, cls in CAPABILITY_TYPES.items():
        try:
            made[name] = needs[name](cls) if name in needs else cls()
        except NotImplementedError:  # WindowsWorkspace: pydantic-ai builds it on Windows only
            made[name] = None
    return made


def test_each_capability_runs_or_is_refused_with_its_reason(tmp_path: Path) -> None:
    unbuildable: list[str] = []
    for name, capability in _instances(tmp_path).items():
        if capability is None:
            unbuildable.append(name)
            continue
        try:
            agent = Agent(_model(), name="cap", capabilities=[capability])
        except NotImplementedError:  # WindowsWorkspace: pydantic-ai builds it on Windows only
            unbuildable.append(name)
            continue
        if VERDICTS[name] is None:
            hx.from_pydantic_ai(agent)
            continue
        with pytest.raises(UnsupportedFeatureError) as err:
            hx.from_pydantic_ai(agent)
        assert "because" in str(err.value) and err.value.code == "unsupported_feature", name
        assert name in str(err.value), str(err.value)
    assert unbuildable in ([], ["WindowsWorkspace"])


def test_hooks_and_custom_capabilities_are_refused() -> None:
    from pydantic_ai.capabilities import AbstractCapability, Hooks

    class Mine(AbstractCapability[Any]):
        pass

    for capability in (Hooks(), Mine()):
        with pytest.raises(UnsupportedFeatureError, match=f"capability {type(capability).__name__} is not supported, because"):
            hx.from_pydantic_ai(Agent(_model(), name="hooked", capabilities=[capability]))


class _SettingsSeen(FunctionModel):
    """Records the settings a request is made with, before pydantic-ai turns the unified ones
    (``cache``, ``thinking``) into the provider's own (a function model has none, so it drops them)."""

    asked: list[dict[str, Any]]

    async def request(self, messages: list[ModelMessage], model_settings: Any, params: Any) -> ModelResponse:
        self.asked.append(dict(model_settings or {}))
        return await super().request(messages, model_settings, params)


@one_database  # what is sent to the model
def test_settings_capabilities_reach_every_model_request(make_runtime: Any) -> None:
    """Caching, Thinking and Citations: their settings are merged over the agent's, request after request."""
    from pydantic_ai.capabilities import Caching, Citations, Thinking

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("ping", {}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    model = _SettingsSeen(reply)
    model.asked = []
    agent = Agent(model, name="cached", model_settings={"temperature": 0.2},
                  capabilities=[Caching(), Thinking(effort="low"), Citations()])

    @agent.tool_plain
    def ping() -> str:
        return "pong"

    rt = make_runtime([agent])
    result = rt.start("cached", "hi").result(timeout=60)
    assert result.status == "completed" and result.output == "done"
    assert len(model.asked) == 2
    for settings in model.asked:  # max_retries=0: the step's retry budget is the only one (the SDK's are off)
        assert settings == {"temperature": 0.2, "cache": True, "thinking": "low", "citations": True, "max_retries": 0}


class Hit(pydantic.BaseModel):
    venue: str


class Miss(pydantic.BaseModel):
    reason: str


def test_union_output_runs_and_stores_the_member(make_runtime: Any) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool = info.output_tools[0]
        assert set(tool.parameters_json_schema["properties"]) == {"response"}
        return ModelResponse(parts=[ToolCallPart(tool.name, {"response": {"reason": "sold out"}}, "o1")])

    agent = Agent(FunctionModel(reply), name="either", output_type=Hit | Miss)
    rt = make_runtime([agent])
    result = rt.start("either", "find one").result(timeout=60)
    assert result.status == "completed" and result.output == {"reason": "sold out"}
    # the output tool is the run's output, not a call: its row says so, and so does helix-dbos calls
    (row,) = rt.reader.calls(session_id=result.session_id)
    assert (row["kind"], row["replay"], row["attempts"], row["result"]) == ("finish", "safe", 0, {"reason": "sold out"})
    from rich.console import Console

    from helix_dbos.cli.render import calls_table, describe

    console = Console(record=True, width=200)
    console.print(calls_table([row]))
    shown = console.export_text()
    assert "final_result (the run's output)" in shown and "unsafe" not in shown and "safe" not in shown, shown
    saved = next(e for e in rt.reader.events(result.session_id).events if e["type"] == "call_saved")
    assert describe(saved, {}).startswith("output given through final_result"), describe(saved, {})
    # ... and so does the operator's page (/ui): the event line and the calls table
    from helix_dbos.service import ui

    assert ui._event_text(saved, {}).startswith("output given through final_result"), ui._event_text(saved, {})
    page_row = ui._call_rows([row], {}, {}, result.session_id)
    assert "final_result (the run&#x27;s output)" in page_row and "safe" not in page_row, page_row


def test_output_types_supported_or_refused_by_construct() -> None:
    from pydantic_ai.output import NativeOutput, PromptedOutput, TextOutput, ToolOutput

    def to_hit(venue: str) -> Hit:
        return Hit(venue=venue)

    def shout(text: str) -> str:
        return text.upper()

    read = hx.from_pydantic_ai
    assert read(Agent(_model(), name="u", output_type=Hit | Miss)).output_definition() is not None
    assert read(Agent(_model(), name="o", output_type=Hit | None)).output_definition() is not None
    assert read(Agent(_model(), name="t", output_type=ToolOutput(Hit))).output_type is Hit
    refused = {
        "ToolOutput(..., name='pick')": ToolOutput(Hit, name="pick"),
        "NativeOutput(...)": NativeOutput(Hit),
        "PromptedOutput(...)": PromptedOutput(Hit),
        "TextOutput(...)": TextOutput(shout),
        "to_hit (an output function)": to_hit,
        "(a sequence of output types)": [Hit, Miss],
        "a union with str": Hit | str,
    }
    for construct, output in refused.items():
        with pytest.raises(UnsupportedFeatureError) as err:
            read(Agent(_model(), name="r", output_type=output))
        assert construct in str(err.value) and "because" in str(err.value), str(err.value)


MODULE_AGENT = Agent(_model())  # no name=: named after this module-level variable


def test_names_are_inferred_as_pydantic_ai_does_and_refused_when_unstable() -> None:
    assert hx.from_pydantic_ai(MODULE_AGENT).name == "MODULE_AGENT"
    local_agent = Agent(_model())
    assert hx.from_pydantic_ai(local_agent).name == "local_agent"  # the caller's variable, as pydantic-ai
    assert hx.from_pydantic_ai(Agent(_model(), name="given")).name == "given"
    with pytest.raises(ConfigurationError, match="not bound to a variable"):
        hx.from_pydantic_ai(Agent(_model()))
    twice = Agent(_model())
    first, second = types.ModuleType("helix_test_names_a"), types.ModuleType("helix_test_names_b")
    first.one, second.other = twice, twice  # type: ignore[attr-defined]
    sys.modules[first.__name__], sys.modules[second.__name__] = first, second
    try:
        with pytest.raises(ConfigurationError, match=r"several names \(one, other\)"):
            hx.from_pydantic_ai(twice)
    finally:
        del sys.modules[first.__name__], sys.modules[second.__name__]


def test_inferred_name_keys_deps_factories_and_policies(make_runtime: Any) -> None:
    seen: list[Any] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("whoami", {}, "w1")])
        return ModelResponse(parts=[TextPart("ok")])

    keeper = Agent(FunctionModel(reply), deps_type=dict)

    @keeper.tool
    def whoami(ctx: RunContext[Any]) -> str:
        seen.append(ctx.deps)
        return str(ctx.deps["user"])

    rt = make_runtime([keeper], deps_factories={"keeper": lambda data: {**data, "built": True}},
                      tool_policies={"keeper": {"whoami": {"replay": "safe"}}})
    result = rt.start("keeper", "who?", deps={"user": "ann"}).result(timeout=60)
    assert result.status == "completed"
    assert seen == [{"user": "ann", "built": True}]
    (call,) = rt.reader.calls(session_id=result.session_id)
    assert call["replay"] == "safe"
