"""What a tool body knows about the call it is answering."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DispatchIdUnavailableError


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
