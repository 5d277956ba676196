"""Runtime results as API bodies. Pure conversions (no FastAPI), shared with the CLI's ``--json``."""

from __future__ import annotations

from typing import Any

from ..definitions import Agent
from ..runtime import AnswerReceipt, RunResult, SessionView, transcript
from . import schemas as s


def run_out(result: RunResult) -> s.RunOut:
    return s.RunOut(
        run_id=result.run_id,
        session_id=result.session_id,
        status=result.status,
        output=result.output,
        pending=[s.PendingCallOut(dispatch_id=p.dispatch_id, tool_name=p.tool_name, kind=p.kind, args=p.args, tool_call_id=p.tool_call_id) for p in result.pending],  # type: ignore[arg-type]
        error=result.error,
        error_code=result.error_code,
        usage=s.UsageOut(
            requests=result.usage.requests,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            total_tokens=result.usage.total_tokens,
        ),
    )


def _pick(model: type[Any], row: dict[str, Any]) -> Any:
    return model(**{k: row.get(k) for k in model.model_fields})


def session_out(view: SessionView, owner: str | None = None) -> s.SessionOut:
    return s.SessionOut(
        session_id=view.session_id,
        agent_name=view.agent_name,
        owner=owner,
        status=view.status,
        current_run_id=view.current_run_id,
        messages=[transcript.dump(m) for m in view.messages],  # exact, also a lone surrogate in a key
        runs=[_pick(s.RunRow, r) for r in view.runs],
        checkpoints=[_pick(s.CheckpointOut, c) for c in view.checkpoints],
        calls=[
            s.CallOut(
                dispatch_id=c.dispatch_id,
                tool_name=c.tool_name,
                kind=c.kind,
                args=c.args,
                status=c.status,
                attempts=[_pick(s.AttemptOut, a) for a in c.attempts],
                result=c.result,
                error=c.error,
                replay=c.replay,
                step=c.step,
                position=c.position,
                run_id=c.run_id,
                note=c.note,
                tool_call_id=c.tool_call_id,
                approved=c.approved,
                approval_actor=c.approval_actor,
                child_session_id=c.child_session_id,
                decided_by=c.decided_by,
                check_outcome=c.check_outcome,
            )
            for c in view.calls
        ],
    )


def answer_out(receipt: AnswerReceipt, run: s.RunOut | None) -> s.AnswerOut:
    return s.AnswerOut(session_id=receipt.session_id, dispatch_id=receipt.dispatch_id, remaining=list(receipt.remaining), run=run)


def agent_out(agent: Agent) -> s.AgentOut:
    return s.AgentOut(
        name=agent.name,
        instructions=agent.instructions,
        tools=[
            s.ToolOut(
                name=t.name,
                description=t.description,
                replay=t.replay,
                client=t.client,
                requires_approval=bool(t.requires_approval),
                concurrency_group=t.concurrency_group,
                sequential=t.sequential,
            )
            for t in agent.tools
        ],
    )
