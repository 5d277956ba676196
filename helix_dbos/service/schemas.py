"""The request and response bodies of the HTTP API (what OpenAPI publishes).

The bodies that carry ledger reads (``RunOut``, ``SessionOut``, ``CallOut``...) are derived from the
Python views in ``helix_dbos/wire.py`` and re-exported here; this module adds the requests and the
bodies only the service has (answers, stops, agents, health).

Requests forbid unknown fields: a misspelt ``mesage`` is refused with a 400 instead of silently
starting a turn without its message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, JsonValue, Tag

from ..definitions.inputs import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    SESSION_ID_MAX_LENGTH,
    SESSION_ID_PATTERN,
    SESSION_ID_RULE,
    TEXT_PATTERN,
)
from ..wire import (  # noqa: F401  (re-exported: the response bodies of ledger reads)
    AttemptOut,
    CallOut,
    CheckpointOut,
    ExecutorOut,
    PendingCallOut,
    RunOut,
    RunRow,
    SessionOut,
    SessionSummary,
    StopOut,
    UsageOut,
)


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The byte rule, published: caller text holds no NUL and no lone surrogate. The service enforces it
#: with ``definitions.inputs.check_text`` (pydantic's Rust regex cannot name a surrogate), so the
#: pattern is only put in the schema.
TEXT: dict[str, JsonValue] = {"pattern": TEXT_PATTERN}
#: Checkpoint ids are ``varchar(80)`` in the ledger.
CHECKPOINT_ID_MAX_LENGTH = 80


def integral(value: Any) -> Any:
    """A float with no fraction (``5.0``, ``1e3``) as the integer it is: JSON Schema's ``integer``
    is any number without a fraction, and a JavaScript client cannot tell 5 from 5.0. Anything
    else is left to the strict ``int`` check (``5.5``, ``"5"`` and ``true`` are refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _priority() -> Any:
    return Field(
        default=None, strict=True, ge=PRIORITY_MIN, le=PRIORITY_MAX,
        description="Where the run waits on its queue, among its owner's queued runs: lower goes first, 1 to 2147483647; "
        "none is DBOS's 0, ahead of every given priority. It orders a run that is enqueued (a front end, a worker, an agent "
        "with max_running); a run the serving process starts itself waits on no queue (docs/scaling.md).",
    )


#: An entry's priority: an integer, also written as a number without a fraction (``integral``).
Priority = Annotated[int | None, BeforeValidator(integral)]


class StartSession(Request):
    agent: str = Field(min_length=1, max_length=200, description="The agent that owns the new session.")
    message: str = Field(min_length=1, description="The user's message: the first turn.", json_schema_extra=TEXT)
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=SESSION_ID_MAX_LENGTH,
        pattern=SESSION_ID_PATTERN,
        description=f"Choose the id (idempotency for the creation); minted when absent. A session id is {SESSION_ID_RULE}. "
        "With authentication on, an id for a new session must start with the caller's namespace (docs/service.md, \"Owners and roles\").",
    )
    priority: Priority = _priority()


class NewTurn(Request):
    message: str = Field(min_length=1, description="The next user message; it redirects any unanswered step.", json_schema_extra=TEXT)
    priority: Priority = _priority()


class ResumeContinue(Request):
    """Recover the saved step as it stands."""

    mode: Literal["continue"] = "continue"
    priority: Priority = _priority()


class ResumeWithMessage(Request):
    """Redirect the saved step with a user message."""

    mode: Literal["with_message"]
    message: str = Field(min_length=1, json_schema_extra=TEXT)
    priority: Priority = _priority()


class ResumeFromCheckpoint(Request):
    """Rewind to a saved append (a checkpoint of kind ``append``) and run from there."""

    mode: Literal["from_checkpoint"]
    checkpoint_id: str = Field(min_length=1, max_length=CHECKPOINT_ID_MAX_LENGTH, json_schema_extra=TEXT)
    priority: Priority = _priority()


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

    message: str | None = Field(default=None, min_length=1, json_schema_extra=TEXT)
    priority: Priority = _priority()


class RetryFromCheckpoint(Request):
    """Redirect the run at a saved checkpoint: a checkpoint needs the message that redirects it."""

    checkpoint_id: str = Field(min_length=1, max_length=CHECKPOINT_ID_MAX_LENGTH, json_schema_extra=TEXT)
    message: str = Field(min_length=1, json_schema_extra=TEXT)
    priority: Priority = _priority()


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
    reason: str | None = Field(default=None, max_length=2000, description="Free text kept on the call for audit.", json_schema_extra=TEXT)
    priority: Priority = _priority()


#: The tags of the body unions above: not field names, so error messages leave them out.
UNION_TAGS = frozenset({"continue", "with_message", "from_checkpoint", "recover", "checkpoint", "result", "error"})


class ClientOk(Request):
    result: Any = Field(description="The client tool's JSON result (null is a result).")
    priority: Priority = _priority()


class ClientFailed(Request):
    error: str = Field(min_length=1, description="The client tool failed with this message.", json_schema_extra=TEXT)
    priority: Priority = _priority()


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


class AnswerOut(BaseModel):
    session_id: str
    dispatch_id: str
    remaining: list[str] = Field(description="Calls of the step still waiting for an answer.")
    run: RunOut | None = Field(description="The run the last answer continued, if any.")


class ToolOut(BaseModel):
    name: str
    description: str
    replay: str
    client: bool
    requires_approval: bool
    concurrency_group: str | None
    sequential: bool


class UnlistedToolset(BaseModel):
    toolset: str = Field(description="The toolset as pydantic-ai labels it (an MCP server: its command or URL).")
    error: str = Field(description="Why it could not list its tools (a server that is down, a listing that needs a run's deps).")


class AgentOut(BaseModel):
    name: str
    instructions: str | None
    tools: list[ToolOut]
    unlisted: list[UnlistedToolset] = Field(
        default_factory=list, description="Toolsets that could not be listed: their tools are missing from tools."
    )


class Health(BaseModel):
    status: Literal["ok"]
    executor_id: str
    database: Literal["postgresql", "sqlite"]
