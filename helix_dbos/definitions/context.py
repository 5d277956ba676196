"""What a tool body knows about the call it is answering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a tool module imports this; sqlalchemy loads with the runtime
    from ..ledger.body_guard import ToolConnection

from ..errors import ConfigurationError, DispatchIdUnavailableError


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Passed to a tool whose first parameter is annotated ``ToolContext``.

    ``dispatch_id`` is minted by the runtime and committed on the call's row before the body starts;
    it is the same on every attempt of the call, on every entry, in any process. Key external
    effects on ``f"{session_id}:{dispatch_id}"``. ``tool_call_id`` is the provider's and nothing
    vouches that it is unique or stable, so never dedupe on it.
    """

    session_id: str
    run_id: str
    dispatch_id: str | None
    tool_call_id: str | None
    attempt: int
    agent_name: str
    tool_name: str = ""
    #: A transactional tool's connection, inside the one transaction that also records the call's
    #: result (None for other tools): ``execute``/``scalar``/``scalars``/``exec_driver_sql`` only.
    #: Committing, rolling back, beginning, or writing the runtime's own tables through it raises
    #: ``ToolConnectionError`` and changes nothing (``ledger/body_guard.py``).
    connection: ToolConnection | None = None
    #: The human's answer on a call that awaited approval (None when it awaited none); a body runs
    #: only past the gate, so True here is what ``RunContext.tool_call_approved`` reports.
    approved: bool | None = None

    def require_connection(self) -> ToolConnection:
        """The transaction's connection, or a loud failure in a tool that is not ``transactional``."""
        if self.connection is None:
            raise ConfigurationError(f"tool {self.tool_name!r} has no ctx.connection: define it with transactional=True")
        return self.connection

    def require_dispatch_id(self) -> str:
        """The dispatch id, or a loud failure where the profile mints none (``dbos_compat``)."""
        if self.dispatch_id is None:
            raise DispatchIdUnavailableError(
                f"tool {self.tool_name!r} needs ctx.dispatch_id as its dedupe key, but this runtime's "
                "recovery profile ('dbos_compat') does not mint one; use recovery='full'"
            )
        return self.dispatch_id


@dataclass(frozen=True, slots=True)
class RunScope:
    """What an agent's per-run hooks know: which run and step asks, and the deps input it stored.

    ``deps_input`` is the JSON the run's session stored when it was started with ``deps=...``; an
    agent with a deps factory turns it into ``RunContext.deps`` in whichever process runs the step.
    """

    session_id: str
    run_id: str
    step: int = 0
    deps_input: object = None


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a ``reconcile`` check is given: the call as it was saved, and the key its body used.

    ``args`` are the saved arguments (a dict of JSON values); ``attempts`` is how many bodies have
    started. Look the effect up by ``f"{session_id}:{dispatch_id}"``, the key the body sent.
    """

    session_id: str
    dispatch_id: str
    tool_name: str
    args: Any
    attempts: int
    run_id: str
