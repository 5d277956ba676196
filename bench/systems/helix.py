"""helix_dbos on the same scripted workload.

Same `FunctionModel` script, same tool bodies (`bench.workload.TOOL_FUNCTIONS`, wrapped by `hx.tool`
exactly as a user would), so the only difference from the baselines is the runtime: the ledger,
the save-first append checkpoint, the attempt gate before every body and the step commit.

Why the runtime shares the bench's DBOS instead of configuring its own: the interleaved comparison
needs all runners in one process on one DBOS launch (DBOS is one per process). `Runtime.launch()`
reuses an already-configured DBOS: it takes the URL and executor id from that instance's config
(when `database_url` is not passed), migrates the ledger, registers `helix.run`, launches DBOS if
nobody did yet, and registers its queue. So the helix runner must be built *last*, after the
baselines have decorated their workflows (`LAUNCHES_DBOS` tells `bench.harness` to do that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from bench.workload import (
    MODEL_NAME,
    TOOL_FUNCTIONS,
    WorkloadSpec,
    make_model,
    scripted_usage,
    tool_args,
)

AGENT_NAME = "bench_helix"
TURN_AGENT_NAME = "bench_helix_turns"


def helix_tools(sequential: bool = False) -> list[hx.Tool]:
    """The workload bodies as helix tools. `replay="safe"`: they are pure, as the baselines assume
    (DBOS steps are at-least-once). The policy changes nothing on the happy path measured here.
    `sequential`: see `WorkloadSpec.one_at_a_time`."""
    return [hx.tool(replay="safe", name=name, sequential=sequential)(fn) for name, fn in TOOL_FUNCTIONS.items()]


def make_agent(spec: WorkloadSpec, name: str = AGENT_NAME) -> hx.Agent:
    """The benchmark agent: the workload's own script and bodies, no instructions, text output."""
    return hx.Agent(name, make_model(spec), tools=helix_tools(spec.one_at_a_time), max_steps=spec.model_requests + 5)


def make_turn_model_function(spec: WorkloadSpec) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """A script for long sessions: every *turn* (user prompt) gets `spec.steps` tool steps, then text.

    The workload's own script counts every `ModelResponse` in the history, so a second turn of the
    same session would answer at once; this one counts only the responses since the last user
    prompt, so each turn costs the same however long the session already is.
    """
    names = list(TOOL_FUNCTIONS)

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        since = 0
        for m in reversed(messages):
            if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts):
                break
            if isinstance(m, ModelResponse):
                since += 1
        if since < spec.steps:
            calls = [
                ToolCallPart(tool_name=names[i % len(names)], args=tool_args(names[i % len(names)], since, i), tool_call_id=f"t{len(messages)}-{i}")
                for i in range(spec.tools_per_step)
            ]
            return ModelResponse(parts=list(calls), model_name=MODEL_NAME, usage=scripted_usage())
        return ModelResponse(parts=[TextPart(f"turn done after {since} steps")], model_name=MODEL_NAME, usage=scripted_usage())

    return script


def make_turn_agent(spec: WorkloadSpec) -> hx.Agent:
    return hx.Agent(
        TURN_AGENT_NAME,
        FunctionModel(make_turn_model_function(spec), model_name=MODEL_NAME),
        tools=helix_tools(),
        max_steps=spec.model_requests + 5,
    )


CAPPED_AGENT = "bench_capped"
RATED_AGENT = "bench_rated"
CAP = 5
"""The issue's per-agent concurrency limit (`bench/scale.py`'s limits phase)."""
RATE = 10
"""Model requests per second of `bench_rated`, across both workers of that phase."""


def limited_agents(spec: WorkloadSpec, rate: int = RATE) -> tuple[list[hx.Agent], dict[str, hx.AgentLimits]]:
    """The limited agents every process of the scale section's limits phase defines (same agents, same limits)."""
    agents = [make_agent(spec, CAPPED_AGENT), make_agent(spec, RATED_AGENT)]
    limits = {CAPPED_AGENT: hx.AgentLimits(max_running=CAP), RATED_AGENT: hx.AgentLimits(model_requests=(rate, 1.0))}
    return agents, limits


class HelixRunner:
    """A launched `hx.Runtime` plus the one-iteration callable the harness times.

    Sync on purpose: `Runtime.start(...).result()` is the public blocking API a user calls, and it
    runs the workflow on DBOS's own event loop, not the caller's.
    """

    LAUNCHES_DBOS = True

    def __init__(self, spec: WorkloadSpec, agents: list[hx.Agent] | None = None, **runtime_kw: Any) -> None:
        self.spec = spec
        self.agent = make_agent(spec)
        self.runtime = hx.Runtime([self.agent, *(agents or [])], **runtime_kw).launch()
        self.last_run_id: str | None = None

    def __call__(self) -> Any:
        return self.run().output

    def run(self, message: str | None = None, session_id: str | None = None, agent: str = AGENT_NAME) -> hx.RunResult:
        result = self.runtime.start(agent, message or self.spec.prompt, session_id=session_id).result()
        self.last_run_id = result.run_id
        if result.status != "completed":
            raise RuntimeError(f"helix run ended {result.status}: {result.error_code} {result.error}")
        return result

    def close(self) -> None:
        self.runtime.shutdown()


def make_runner(spec: WorkloadSpec) -> HelixRunner:
    """For `bench.harness` (call after `configure_dbos(..., launch=False)`; it launches DBOS)."""
    return HelixRunner(spec)


make_runner.LAUNCHES_DBOS = True  # type: ignore[attr-defined]
