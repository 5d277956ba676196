"""The request and response bodies of the HTTP API (what OpenAPI publishes).

Requests forbid unknown fields: a misspelt ``mesage`` is refused with a 400 instead of silently
starting a turn without its message.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from ..definitions.inputs import SESSION_ID_MAX_LENGTH, SESSION_ID_PATTERN


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartSession(Request):
    agent: str = Field(min_length=1, max_length=200, description="The agent that owns the new session.")
    message: str = Field(min_length=1, description="The user's message: the first turn.")
    session_id: str | None = Field(default=None, min_length=1, max_length=SESSION_ID_MAX_LENGTH, pattern=SESSION_ID_PATTERN, description="Choose the id (idempotency for the creation); minted when absent.")


class NewTurn(Request):
    message: str = Field(min_length=1, description="The next user message; it redirects any unanswered step.")


class ResumeContinue(Request):
    """Recover the saved step as it stands."""

    mode: Literal["continue"] = "continue"


class ResumeWithMessage(Request):
    """Redirect the saved step with a user message."""

    mode: Literal["with_message"]
    message: str = Field(min_length=1)


class ResumeFromCheckpoint(Request):
    """Rewind to a saved append (a checkpoint of kind ``append``) and run from there."""

    mode: Literal["from_checkpoint"]
    checkpoint_id: str = Field(min_length=1)


def _tag(key: str, default: str) -> Callable[[Any], str | None]:
    """Pick a union member by one field, so a refusal names that member's missing or extra field."""

    def pick(value: Any) -> str | None:
        if isinstance(value, dict):
            return str(value.get(key, default)) if key != "*" else default
        return getattr(value, key, default) if isinstance(value, BaseModel) else None

    return pick


#: Exactly the bodies the service accepts: each mode with exactly the fields it uses.
Resume = Annotated[
    Annotated[ResumeContinue, Tag("continue")] | Annotated[ResumeWithMessage, Tag("with_message")] | Annotated[ResumeFromCheckpoint, Tag("from_checkpoint")],
    Discriminator(_tag("mode", "continue"), custom_error_type="invalid_mode", custom_error_message="mode must be 'continue', 'with_message' or 'from_checkpoint'"),
]


class RetryRecover(Request):
    """Recover the failed or interrupted run; with ``message``, redirect it instead."""

    message: str | None = Field(default=None, min_length=1)


class RetryFromCheckpoint(Request):
    """Redirect the run at a saved checkpoint: a checkpoint needs the message that redirects it."""

    checkpoint_id: str = Field(min_length=1)
    message: str = Field(min_length=1)


def _retry_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        return "checkpoint" if "checkpoint_id" in value else "recover"
    return "checkpoint" if isinstance(value, RetryFromCheckpoint) else "recover" if isinstance(value, RetryRecover) else None


Retry = Annotated[
    Annotated[RetryRecover, Tag("recover")] | Annotated[RetryFromCheckpoint, Tag("checkpoint")],
    Discriminator(_retry_tag, custom_error_type="invalid_body", custom_error_message="a retry body is an object"),
]


class Stop(Request):
    """Who asked is the authenticated principal, recorded on the stop; it is not a request field."""

    kind: Literal["interrupt", "abort"] = "interrupt"


class Approval(Request):
    """The actor recorded on the call is the authenticated principal, never a request field."""

    approved: bool
    reason: str | None = Field(default=None, max_length=2000, description="Free text kept on the call for audit.")


#: The tags of the body unions above: not field names, so error messages leave them out.
UNION_TAGS = frozenset({"continue", "with_message", "from_checkpoint", "recover", "checkpoint", "result", "error"})


class ClientOk(Request):
    result: Any = Field(description="The client tool's JSON result (null is a result).")


class ClientFailed(Request):
    error: str = Field(min_length=1, description="The client tool failed with this message.")


#: A client-tool answer is exactly one of ``result`` or ``error``.
def _answer_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        if ("error" in value) == ("result" in value):
            return None  # neither or both: refused with the sentence below
        return "error" if "error" in value else "result"
    return "error" if isinstance(value, ClientFailed) else "result" if isinstance(value, ClientOk) else None


ClientResult = Annotated[
    Annotated[ClientOk, Tag("result")] | Annotated[ClientFailed, Tag("error")],
    Discriminator(_answer_tag, custom_error_type="invalid_body", custom_error_message="give exactly one of result or error"),
]


class ErrorBody(BaseModel):
    error: str = Field(description="A sentence safe to show an end user.")
    code: str = Field(description="Stable machine-readable code, e.g. session_running.")
    detail: Any = Field(default=None, description="Developer-facing specifics.")


class UsageOut(BaseModel):
    requests: int
    input_tokens: int
    output_tokens: int
    total_tokens: int


class PendingCallOut(BaseModel):
    dispatch_id: str
    tool_name: str
    kind: Literal["approval", "client"]
    args: Any
    tool_call_id: str | None


class RunOut(BaseModel):
    run_id: str
    session_id: str
    status: str
    output: Any = None
    pending: list[PendingCallOut]
    error: str | None = None
    error_code: str | None = None
    usage: UsageOut


class AttemptOut(BaseModel):
    attempt: int
    run_id: str
    executor_id: str | None
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None


class CallOut(BaseModel):
    dispatch_id: str
    tool_name: str
    kind: str
    args: Any
    status: str
    attempts: list[AttemptOut]
    result: Any
    error: Any
    replay: str
    step: int
    position: int
    run_id: str
    note: str | None
    tool_call_id: str | None
    approved: bool | None
    approval_actor: str | None
    child_session_id: str | None
    decided_by: str | None = Field(default=None, description="'database' or 'check' when recovery, not the body, proved the outcome.")
    check_outcome: Any = Field(default=None, description="The reconcile check's last answer: verdict, attempt, result or reason.")


class RunRow(BaseModel):
    run_id: str
    seq: int
    entry: str
    entry_message: str | None
    checkpoint_id: str | None
    previous_run_id: str | None
    status: str
    error_code: str | None
    error: str | None
    output: Any
    steps: int
    recovery: str
    executor_id: str | None
    created_at: datetime
    ended_at: datetime | None


class CheckpointOut(BaseModel):
    checkpoint_id: str
    run_id: str
    step: int
    kind: str
    message_seq: int
    superseded_by: str | None
    created_at: datetime


class SessionOut(BaseModel):
    session_id: str
    agent_name: str
    owner: str | None = Field(default=None, description="The principal that started the session (none without authentication).")
    status: str
    current_run_id: str | None
    messages: list[dict[str, Any]] = Field(description="The active transcript as pydantic-ai messages (JSON).")
    runs: list[RunRow]
    checkpoints: list[CheckpointOut]
    calls: list[CallOut]


class SessionSummary(BaseModel):
    session_id: str
    agent_name: str
    owner: str | None = None
    status: str
    current_run_id: str | None
    run_count: int
    created_at: datetime
    updated_at: datetime


class AnswerOut(BaseModel):
    session_id: str
    dispatch_id: str
    remaining: list[str] = Field(description="Calls of the step still waiting for an answer.")
    run: RunOut | None = Field(description="The run the last answer continued, if any.")


class StopOut(BaseModel):
    session_id: str
    run_id: str
    stopped: bool = Field(description="True when the run stopped in this request (it was suspended).")
    status: str


class ToolOut(BaseModel):
    name: str
    description: str
    replay: str
    client: bool
    requires_approval: bool
    concurrency_group: str | None
    sequential: bool


class AgentOut(BaseModel):
    name: str
    instructions: str | None
    tools: list[ToolOut]


class ExecutorOut(BaseModel):
    """One executor's lease, as ``helix-dbos executors`` and the ``executor_audit`` view show it."""

    executor_id: str
    host: str | None
    pid: int | None
    generation: int
    lease_seconds: float
    status: Literal["live", "lapsed", "released", "taken_over"]
    started_at: Any = None
    renewed_at: Any = None
    released_at: Any = None
    taken_over_by: str | None
    taken_over_at: Any = None
    taken_runs: int | None
    pending_runs: int = Field(description="Workflows DBOS still holds pending for this executor id.")
    took_over: list[str] = Field(description="Executors whose runs this one took over.")


class Health(BaseModel):
    status: Literal["ok"]
    executor_id: str
    database: Literal["postgresql", "sqlite"]
