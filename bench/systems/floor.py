"""The plain-DBOS floor: the workload's shape as a DBOS workflow of plain ``@DBOS.step`` functions, no pydantic-ai.

What an independent benchmark took as the floor of any durable agent loop on DBOS: per run one
async workflow, one step per "model request" (a plain function that returns the next scripted
reply: a list of tool calls, or the final text) and one step per tool call (the workload's own
bodies, concurrent via ``asyncio.gather``), the same 5 steps x 3 calls + an answer. No message
types, no history serialization, no model abstraction: what is left is DBOS's own bookkeeping (a
checkpoint per step, the workflow's rows), which every shape on DBOS pays at least.

Build it after ``bench.dbs.configure_dbos(url, launch=False)`` and before ``DBOS.launch()``, like
``bench.systems.bare``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from dbos import DBOS

from bench.systems.bare import as_dbos_step
from bench.workload import TOOL_FUNCTIONS, Runner, WorkloadSpec, tool_args

WORKFLOW_NAME = "bench.floor.run"


def script_reply(spec: WorkloadSpec, step: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted reply to request ``step``: the tool calls of a step (the workload's names and
    arguments), or after ``spec.steps`` steps the answer, a digest of every result the loop fed back."""
    names = list(TOOL_FUNCTIONS)
    if step < spec.steps:
        return {"calls": [{"tool": names[i % len(names)], "args": tool_args(names[i % len(names)], step, i)} for i in range(spec.tools_per_step)]}
    digest = hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()[:12]
    return {"text": f"done: {step} steps, {len(results)} tool results, digest {digest}"}


def expected_floor_answer(spec: WorkloadSpec) -> str:
    """The floor's answer, computed from the bodies' outputs directly (they are pure)."""
    from bench.workload import _expected_result

    names = list(TOOL_FUNCTIONS)
    results = [_expected_result(names[i % len(names)], tool_args(names[i % len(names)], s, i)) for s in range(spec.steps) for i in range(spec.tools_per_step)]
    return str(script_reply(spec, spec.steps, results)["text"])


def make_runner(spec: WorkloadSpec) -> Runner:
    """Register ``bench.floor.run`` (6 reply steps, 15 tool steps a run) and return a runner of one run."""

    @DBOS.step(name="bench.floor.reply")
    async def reply(step: int, results: list[dict[str, Any]]) -> dict[str, Any]:
        return script_reply(spec, step, results)

    tools = {name: as_dbos_step(fn, f"bench.floor.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()}

    @DBOS.workflow(name=WORKFLOW_NAME)
    async def floor_run(prompt: str) -> str:
        results: list[dict[str, Any]] = []
        for step in range(spec.model_requests):
            r = await reply(step, results)
            if "text" in r:
                return str(r["text"])
            results += await asyncio.gather(*(tools[c["tool"]](**c["args"]) for c in r["calls"]))
        raise RuntimeError("the script did not answer")

    async def run() -> str:
        return await floor_run(spec.prompt)

    run.workflow = floor_run  # type: ignore[attr-defined]
    run.workflow_name = WORKFLOW_NAME  # type: ignore[attr-defined]
    return run
