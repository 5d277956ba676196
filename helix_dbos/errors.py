"""Public: typed errors: every refusal a caller can meet has its own class and a stable ``code``.

The HTTP service maps ``status`` straight onto the response, and ``error`` is written to be shown to
an end user while ``detail`` carries the developer-facing specifics. Bad input never changes the
ledger: every class here is raised before, or instead of, a write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class HelixError(Exception):
    """Base of every error helix_dbos raises on purpose."""

    code: str = "helix_error"
    status: int = 500
    retryable: bool = False

    def __init__(self, message: str, *, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def to_dict(self) -> dict[str, Any]:
        """The JSON error body the service returns (``error`` is user-safe)."""
        return {"error": self.message, "code": self.code, "detail": self.detail}


class ValidationError(HelixError):
    """The request itself is malformed (the seed's ``validation_error``)."""

    code = "validation_error"
    status = 400


class ConfigurationError(HelixError):
    """The runtime was configured inconsistently; raised at definition or launch time."""

    code = "configuration_error"
    status = 500


class AuthenticationError(HelixError):
    """The request carries no valid credentials (a 401; the service never says which part was wrong)."""

    code = "unauthenticated"
    status = 401


class ForbiddenError(HelixError):
    """The principal may see the session but lacks the role for this action on it."""

    code = "forbidden"
    status = 403


class CsrfError(ForbiddenError):
    """A state-changing request authenticated by the ``/ui`` cookie without the page's CSRF token.

    A browser sends the cookie with requests another page on the same site starts (another port on
    the host, a sibling subdomain); only the page the service rendered knows the token.
    """

    code = "csrf_failed"


class UnsupportedMediaTypeError(ValidationError):
    """A request body that is not declared ``Content-Type: application/json``.

    The API takes JSON only, so a form or ``text/plain`` post from another page (what a browser
    sends cross-origin without asking first) is refused before it is read, empty bodies included.
    """

    code = "unsupported_media_type"
    status = 415


class HostNotAllowedError(ValidationError):
    """The Host header names no trusted host (a DNS-rebinding page, a misrouted proxy)."""

    code = "host_not_allowed"


class NotFoundError(HelixError):
    code = "not_found"
    status = 404


class UnknownAgentError(NotFoundError):
    code = "unknown_agent"


class SessionNotFoundError(NotFoundError):
    code = "session_not_found"


class RunNotFoundError(NotFoundError):
    code = "run_not_found"


class CheckpointNotFoundError(NotFoundError):
    code = "checkpoint_not_found"


class CallNotFoundError(NotFoundError):
    """The answer names no call of this session (unknown or another session's call)."""

    code = "call_not_found"


class ConflictError(HelixError):
    status = 409
    code = "conflict"


class AgentAlreadyRunningError(ConflictError):
    """The run-start gate refused the entry: the session already has a live run."""

    code = "session_running"
    retryable = True


class NothingToResumeError(ConflictError):
    """The entry has nothing to act on (the session finished, or no saved step is left)."""

    code = "nothing_to_resume"


class CallsPendingError(ConflictError):
    """A continue entry was asked for while client or approval calls still await answers."""

    code = "calls_pending"


class AnswerKindError(ValidationError):
    """An approval was sent for a client call, or a client result for an approval call."""

    code = "wrong_answer_kind"


class StaleAnswerError(ConflictError):
    """The call is no longer waiting: answered already, or its run failed or moved on."""

    code = "stale_answer"


class DuplicateAnswerError(StaleAnswerError):
    code = "duplicate_answer"


class ExecutorIdInUseError(ConfigurationError):
    """Another live process holds this executor id; two would run the same steps twice."""

    code = "executor_id_in_use"


class RuntimeAlreadyLaunchedError(ConfigurationError):
    """A ``Runtime`` is already launched in this process; a second would take over its workflows.

    DBOS is one per process and resolves workflows by registered name, so two runtimes cannot share
    it: shut the first down (``runtime.shutdown()``) before launching another.
    """

    code = "runtime_already_launched"


class RunFencedError(ConflictError):
    """A ledger transaction was asked for by a workflow that does not own the run now.

    Only the run's own workflow (workflow id = run id), while the run is its session's current,
    running run, may write for it. A DBOS fork (a new workflow id over the same input), a DBOS
    resume of a run a newer entry took over, or a late workflow of a run that already ended is
    refused here: it writes nothing but a ``run_refused`` event, never asks the model and never
    starts a body. DBOS records this error as the workflow's outcome (``dbos workflow get``).

    DBOS records an error it sees (a step's, a workflow's) with helix's portable JSON serializer,
    which keeps an exception's name, message, ``code`` and ``data`` and gives back a
    ``dbos.PortableWorkflowError`` on replay: the class is lost. ``data`` is this error's typed
    record for that codec (``RECORD_KEY``: its message and detail), and ``from_record`` rebuilds the
    refusal from what DBOS gave back, so a replayed refusal is recognised by type, never by its words.
    """

    code = "run_fenced"
    #: The key of the refusal's record in the ``data`` DBOS keeps with a recorded error.
    RECORD_KEY: ClassVar[str] = "helix_run_fenced"

    @property
    def data(self) -> dict[str, Any]:
        """What DBOS's portable codec records beside the message (it keeps an exception's ``data``)."""
        return {self.RECORD_KEY: {"message": self.message, "detail": self.detail}}

    @classmethod
    def from_record(cls, data: object) -> RunFencedError | None:
        """The refusal a recorded error's ``data`` holds (``data`` above, as DBOS gave it back), or
        None when it holds none."""
        record = data.get(cls.RECORD_KEY) if isinstance(data, Mapping) else None
        if not isinstance(record, Mapping) or not isinstance(record.get("message"), str):
            return None
        return cls(record["message"], detail=record.get("detail"))


class DispatchIdUnavailableError(HelixError):
    """A tool needed ``ctx.dispatch_id`` on a profile that does not mint one (``dbos_compat``)."""

    code = "dispatch_id_unavailable"
    status = 500


class StoreUnavailableError(HelixError):
    """The database stayed unreachable (or locked) for longer than ``store_retry_window``.

    Shorter outages are ridden out by retrying; past the window the run fails with this code (written
    once the store is back) and ``retry()`` continues it, re-running safe bodies by the usual rules.
    """

    code = "store_unavailable"
    status = 503
    retryable = True


def helix_code(exc: BaseException) -> str | None:
    """The stable code of a HelixError, also after DBOS replayed it from a recorded step error
    (the portable serializer gives back a ``PortableWorkflowError`` carrying the class name and code).

    Never a driver's own ``code`` attribute: SQLAlchemy's ``e3q8`` is an internal documentation key.
    """
    if isinstance(exc, HelixError):
        return exc.code
    name, code = getattr(exc, "name", None), getattr(exc, "code", None)
    if isinstance(name, str) and isinstance(code, str) and code in _all_codes().get(name, ()):
        return code
    return None


class RunTimeoutError(HelixError, TimeoutError):
    """A wait (``RunHandle.result``, ``wait``, ``wait_run``) ran out of time before the run came to rest.

    The run goes on; waiting again sees its end. Also a ``TimeoutError``, so code written against
    the builtin still catches it.
    """

    code = "run_timeout"
    status = 504
    retryable = True


class RunFailedError(HelixError):
    """Raised by ``RunResult.raise_for_status()`` for a failed run; ``detail`` holds the reason."""

    code = "run_failed"
    status = 500


def _all_codes() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    stack: list[type[HelixError]] = [HelixError]
    while stack:
        cls = stack.pop()
        out.setdefault(cls.__name__, set()).add(cls.code)
        stack.extend(cls.__subclasses__())
    return out



class UnsupportedFeatureError(ConfigurationError):
    """A pydantic-ai agent uses a feature the runtime cannot honour under the recovery contract."""

    code = "unsupported_feature"


class UsageLimitExceededError(HelixError):
    """A run went past one of its agent's pydantic-ai ``UsageLimits`` (tokens, tool calls): it fails
    typed, as ``agent.run`` raises ``UsageLimitExceeded``; ``retry()`` gives it a fresh budget."""

    code = "usage_limit_exceeded"
    status = 409


class ToolTimeoutError(HelixError):
    """A tool (an MCP server's, typically) gave no answer within the agent's ``tool_timeout``."""

    code = "tool_timeout"


class ToolServerError(HelixError):
    """A toolset's server could not be reached, or died while the call was in flight."""

    code = "tool_server_unavailable"


class ToolConnectionError(HelixError):
    """A transactional body tried to end the call's transaction (commit, roll back, begin) or to write
    the runtime's own tables (``helix``, ``dbos``) through ``ctx.connection``.

    Raised before anything reaches the database, so the transaction is untouched: a body that
    catches it goes on; one that lets it raise is rolled back and this is the call's error."""

    code = "tool_connection_refused"


class PayloadTooLargeError(ValidationError):
    """A request (its body, a message, a client tool's result) over the service's size limits.

    Refused before anything is stored, and for a body before it is read whole: a 50 MB message
    would otherwise be kept several times over (the transcript, the run's input) and read back
    with every view of the session."""

    code = "payload_too_large"
    status = 413


class LimitsMismatchError(ConfigurationError):
    """This process defines an agent's limits (``AgentLimits``) other than the ones the fleet
    recorded for its application version, so the two would not agree on the agent's queue: a front
    end with ``max_running`` and workers without it leave its runs queued for ever; the other way
    round the limit is bypassed. Refused at launch, before the process serves or enqueues anything;
    ``detail`` names the agent, both values and who recorded the fleet's (docs/scaling.md)."""

    code = "limits_mismatch"


class ModelRateLimitedError(HelixError):
    """The model provider kept refusing for rate limit or quota (HTTP 429) through the step's retry
    budget, or asked to wait longer than ``ModelRetries.max_retry_after``. The message keeps the
    provider's status and request id; ``retry()`` continues the run."""

    code = "model_rate_limited"
    status = 429
    retryable = True


class ModelProviderUnavailableError(HelixError):
    """The model provider could not be reached, timed out, was overloaded or answered 5xx through the
    step's retry budget. The message keeps the provider's status and request id; ``retry()``
    continues the run."""

    code = "model_unavailable"
    status = 503
    retryable = True


class ModelAuthFailedError(HelixError):
    """The model provider refused the credentials (HTTP 401/403): asked once, never retried."""

    code = "model_auth_failed"
    status = 502


class ModelRequestInvalidError(HelixError):
    """The model provider refused the request itself (HTTP 400/404/413/422: a bad schema, an unknown
    model, a context window exceeded): asked once, never retried."""

    code = "model_request_invalid"
    status = 502


class OutputRetriesExceededError(HelixError):
    """The model gave no valid output more times than the agent's ``output_retries`` allow (pydantic-ai's
    ``Exceeded maximum output retries``): text or nothing where structured output is required, an
    invalid ``final_result``, or an output validator's ``ModelRetry``."""

    code = "output_retries_exceeded"
    status = 409


class GuardrailTrippedError(HelixError):
    """A guardrail of the agent (an OpenAI Agents SDK agent's ``input_guardrails`` on the run's input,
    ``output_guardrails`` on its final output) tripped its wire: the run ends here, nothing the reply
    planned runs. ``detail`` keeps the guardrail's name, the stage and the output info it returned,
    and the message says them too (the run's ``error``); recorded as the step's outcome, so a
    recovered run fails the same way without running the guardrail again. ``retry()`` asks again."""

    code = "guardrail_tripped"
    status = 409


class TransactionEscapedError(HelixError):
    """A transactional body committed the call's transaction itself (through the driver's connection,
    past ``ctx.connection``): its effect may exist apart from any result. The call is answered
    ``outcome_unknown`` with this code in its error and its note, and is never run again."""

    code = "transaction_escaped"


class StoreStatementError(HelixError):
    """A statement of the runtime's own failed at the database, and not because the database was
    unreachable (that is ``store_unavailable``): the run's error says what the driver said, never the
    SQL text the runtime sent."""

    code = "store_statement_failed"


__all__ = [
    "AgentAlreadyRunningError",
    "AnswerKindError",
    "AuthenticationError",
    "CallNotFoundError",
    "CallsPendingError",
    "CheckpointNotFoundError",
    "ConfigurationError",
    "ConflictError",
    "CsrfError",
    "DispatchIdUnavailableError",
    "DuplicateAnswerError",
    "ExecutorIdInUseError",
    "ForbiddenError",
    "GuardrailTrippedError",
    "HelixError",
    "HostNotAllowedError",
    "LimitsMismatchError",
    "ModelAuthFailedError",
    "ModelProviderUnavailableError",
    "ModelRateLimitedError",
    "ModelRequestInvalidError",
    "NotFoundError",
    "NothingToResumeError",
    "OutputRetriesExceededError",
    "PayloadTooLargeError",
    "RunFailedError",
    "RunFencedError",
    "RunNotFoundError",
    "RunTimeoutError",
    "RuntimeAlreadyLaunchedError",
    "SessionNotFoundError",
    "StaleAnswerError",
    "StoreStatementError",
    "StoreUnavailableError",
    "ToolConnectionError",
    "ToolServerError",
    "ToolTimeoutError",
    "TransactionEscapedError",
    "UnknownAgentError",
    "UnsupportedFeatureError",
    "UnsupportedMediaTypeError",
    "UsageLimitExceededError",
    "ValidationError",
]
