"""From a model reply to planned calls: pure, so a replayed workflow plans the same calls again.

Each ``ToolCallPart`` becomes one planned call with its kind, validated arguments and the policy its
tool has now (saved on the call's row when the step saves first). Bad calls are answered here and
never start a body: malformed arguments and unknown tools get a retry prompt, as pydantic-ai's own
loop sends, so the model can correct itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pydantic

from ...definitions import FINISH_TOOL, Agent
from ...definitions.agents import SubAgentInput
from ...ledger.statuses import BODY_KINDS
from ...ledger.user_json import ToolArgs
from ..floor.records import PlannedCall

log = logging.getLogger("helix_dbos")

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    from ...definitions.tools import Tool


def _args_of(part: ToolCallPart) -> tuple[ToolArgs, str | None]:
    """The arguments as a dict, or the raw text and why it is not one."""
    if isinstance(part.args, str) and part.args.strip():
        try:
            parsed = json.loads(part.args)
        except ValueError as exc:
            return {"_raw": part.args}, f"arguments are not valid JSON: {exc}"
        if not isinstance(parsed, dict):
            return {"_raw": part.args}, "arguments must be a JSON object"
        return parsed, None
    try:
        return part.args_as_dict(), None
    except (ValueError, TypeError) as exc:
        return {"_raw": part.args if isinstance(part.args, str) else repr(part.args)}, f"arguments are not valid JSON: {exc}"


def _invalid(base: PlannedCall, message: str, code: str = "invalid_arguments") -> PlannedCall:
    return replace(base, kind="invalid", status="error", paired_by="validation", error={"code": code, "message": message})


def _errors_text(exc: pydantic.ValidationError) -> str:
    return f"{exc.error_count()} validation error(s): " + "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors(include_url=False)
    ) + ". Fix the errors and try again."


def _needs_approval(tool: Tool, args: ToolArgs) -> bool:
    """A rule that raises asks for a human rather than failing the run: the safe side of a broken rule."""
    try:
        return bool(tool.needs_approval(args))
    except Exception:
        log.warning("approval rule of tool %r raised; asking a human instead", tool.name, exc_info=True)
        return True


def plan_calls(agent: Agent, response: ModelResponse) -> list[PlannedCall]:
    planned: list[PlannedCall] = []
    names = [t.name for t in agent.tools] + [s.tool_name for s in agent.sub_agents]
    from pydantic_ai.messages import ToolCallPart

    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    for position, part in enumerate(calls):
        args, bad_json = _args_of(part)
        # the call as the model made it; each branch below says what it is (its kind and status)
        base = PlannedCall(
            position=position, tool_call_id=part.tool_call_id, tool_name=part.tool_name, args=args, replay="unsafe",
            concurrency_group=None, sequential=False, requires_approval=False, transactional=False, result=None,
            error=None, paired_by=None, kind="invalid", status="error",
        )
        if bad_json:
            planned.append(_invalid(base, bad_json))
            continue
        tool = agent.tool(part.tool_name)
        sub = agent.sub_agent(part.tool_name)
        if part.tool_name == FINISH_TOOL and agent.output_type is not None:
            try:
                output = agent.dump_output(agent.validate_output(args))
            except pydantic.ValidationError as exc:
                planned.append(_invalid(base, _errors_text(exc)))
                continue
            # the run's output, not a call: no body, no effect, and a replayed reply plans it again
            # identically, so nothing about it can happen twice (its row says so: replay "safe",
            # kind "finish", which the CLI and the audit views show as the output)
            planned.append(replace(base, kind="finish", replay="safe", status="ok", result=output, paired_by="body"))
        elif tool is not None:
            try:
                validated = tool.validate(args)
            except pydantic.ValidationError as exc:
                planned.append(_invalid(base, _errors_text(exc)))
                continue
            clean = validated.model_dump(mode="json")
            gated = tool.client or _needs_approval(tool, clean)
            planned.append(
                replace(
                    base,
                    args=clean,
                    kind=tool.kind,
                    replay=tool.replay,
                    concurrency_group=tool.concurrency_group,
                    sequential=tool.sequential,
                    requires_approval=(not tool.client) and gated,
                    transactional=tool.transactional,
                    status="pending" if gated else "saved",
                )
            )
        elif sub is not None:
            try:
                clean = SubAgentInput.model_validate(args).model_dump()
            except pydantic.ValidationError as exc:
                planned.append(_invalid(base, _errors_text(exc)))
                continue
            planned.append(replace(base, args=clean, kind=sub.mode, status="saved"))
        else:
            available = ", ".join(sorted(names + ([FINISH_TOOL] if agent.output_type is not None else []))) or "none"
            planned.append(_invalid(base, f"Unknown tool name: {part.tool_name!r}. Available tools: {available}", "unknown_tool"))
    return planned


def starts_a_body(planned: Sequence[PlannedCall]) -> bool:
    """Whether the step must save first: some call will start a body (or a child)."""
    return any(p.kind in BODY_KINDS and p.status == "saved" for p in planned)


def gives_no_output(planned: Sequence[PlannedCall]) -> bool:
    """Whether a reply of an agent with structured output gave no valid output: text or nothing (no
    call at all), or a ``final_result`` that failed validation or an output validator. What
    pydantic-ai counts against ``output_retries``; calls of other tools alone are not."""
    if not planned:
        return True
    return not any(p.kind == "finish" for p in planned) and any(p.tool_name == FINISH_TOOL and p.kind == "invalid" for p in planned)
