"""A plain pydantic-ai agent with deps, run in real processes (crashed with ``HELIX_DBOS_CRASH_AT``).

    python -m tests.scenarios.deps_app --db URL --effects DIR --executor ID start|wake --session SID

``start`` stores ``deps={"user": "ann", "quota": 3}``; the registered factory rebuilds ``Deps`` from
it in whichever process runs the step, and records each build in ``deps.jsonl``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS: Path = Path(".")


def effect(kind: str, **data: Any) -> None:
    """Append one fsynced line: the test's own record of what really happened."""
    effects.append(EFFECTS, kind, data)


@dataclass
class Deps:
    user: str
    quota: int


def make_deps(data: Any) -> Deps:
    effect("deps", data=data, pid=os.getpid())
    return Deps(**data)


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    seen = {p.tool_name: p.content for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)}
    effect("model", step=n, seen=seen, instructions=info.instructions)
    if n == 0:
        tool = os.environ.get("DEPS_APP_TOOL", "remember")
        parts: list[Any] = [ToolCallPart(tool, {"note": "x"}, "c0")]
        if info.output_tools:  # DEPS_APP_OUTPUT: the same reply also gives the run's output
            parts.append(ToolCallPart(info.output_tools[0].name, {"text": "noted"}, "c1"))
        return ModelResponse(parts=parts)
    return ModelResponse(parts=[TextPart("done")])


class Note(BaseModel):
    text: str


def build_agent() -> Agent[Deps, Any]:
    output: Any = Note if os.environ.get("DEPS_APP_OUTPUT") else str
    agent = Agent(FunctionModel(reply), name="keeper", deps_type=Deps, output_type=output)

    @agent.instructions
    def quota(ctx: RunContext[Deps]) -> str:
        return f"{ctx.deps.user} has {ctx.deps.quota} notes left."

    @agent.tool(metadata={"replay": "unsafe"})  # the app's mapping (TOOL_POLICIES) makes it safe
    def remember(ctx: RunContext[Deps], note: str) -> dict[str, Any]:
        """Keep a note, keyed on the dispatch id (so a re-run is the same note)."""
        effect("bodies", tool="remember", user=ctx.deps.user, dispatch_id=hx.dispatch_id(ctx), pid=os.getpid())
        return {"user": ctx.deps.user, "dispatch_id": hx.dispatch_id(ctx)}

    @agent.tool
    def charge(ctx: RunContext[Deps], note: str) -> str:
        """Charge the user (unsafe: never run twice)."""
        effect("bodies", tool="charge", user=ctx.deps.user, dispatch_id=hx.dispatch_id(ctx), pid=os.getpid())
        return "charged"

    return agent


#: The per-agent mapping by tool name wins over the tool's own metadata, in every process.
TOOL_POLICIES = {"keeper": {"remember": {"replay": "safe", "concurrency_group": "notes"}}}


def install_span_file(path: str) -> None:
    """Spans of this process as JSON lines (the test reads both processes' spans of one run)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            with open(path, "a") as f:
                for s in spans:
                    f.write(json.dumps({"name": s.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id,
                                        "parent_id": s.parent.span_id if s.parent else None, "pid": os.getpid(),
                                        "attributes": dict(s.attributes or {})}) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)


def main(argv: list[str]) -> int:
    global EFFECTS
    if os.environ.get("SPANS_FILE"):
        install_span_file(os.environ["SPANS_FILE"])
    args = effects.app_args(argv)
    EFFECTS = Path(args.effects)
    rt = hx.Runtime([build_agent()], database_url=args.db, executor_id=args.executor, deps_factories={"keeper": make_deps},
                    tool_policies=TOOL_POLICIES).launch()
    try:
        if args.cmd == "start":
            rt.start("keeper", "note this", session_id=args.session, deps={"user": "ann", "quota": 3})
        result = rt.wait(args.session, timeout=60)
        calls = [{"tool": c.tool_name, "status": c.status, "attempts": len(c.attempts), "dispatch_id": c.dispatch_id, "result": c.result}
                 for c in rt.session(result.session_id).calls]
        print(json.dumps({"status": result.status, "output": result.output, "calls": calls}), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
