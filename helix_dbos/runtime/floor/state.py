"""The process's one piece of runtime state: the ``Registry`` the launched runtime installed.

Everything the runtime starts is handed its registry explicitly (``registry.py``), except where
DBOS itself calls in. DBOS is one per process and resolves a workflow by its registered name on
recovery, so a workflow DBOS starts, and the step code under it, can only find the launched runtime
through one process-wide lookup. That lookup is here and nowhere else: ``current()`` (and ``env()``,
its Env, for the workflow code written against it). ``install`` refuses a second registry while one
is live, so a second ``Runtime`` in one process fails typed instead of taking over the first's
workflows; ``uninstall`` at shutdown lets the next one launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ...definitions import Agent
from ...errors import ConfigurationError, RuntimeAlreadyLaunchedError, UnknownAgentError
from ...recovery import Profile
from ..process.config import Settings
from .handoff import Handoff
from .transcript import TranscriptCache

if TYPE_CHECKING:
    from .registry import Registry


@dataclass
class Env:
    agents: dict[str, Agent]
    profile: Profile
    settings: Settings
    #: The workflows' ledger transactions' own pool (``durable.tx``, ``durable.plain_tx``).
    tx_engine: sa.Engine
    engine: sa.Engine
    queue_name: str
    #: Model output deltas go to the run's DBOS stream as they come (``runtime/flow/live.py``).
    live_output: bool = False
    #: What each run driven here has loaded of its transcript (``transcript.TranscriptCache``).
    transcripts: TranscriptCache = field(default_factory=TranscriptCache)
    #: The first model request's read, made by the entry's prepare (by run id: ``handoff.py``).
    prereads: Handoff[str, Any] = field(default_factory=Handoff)
    #: A run's result as the transaction that brought it to rest read it (by run id: ``handoff.py``).
    settled: Handoff[str, Any] = field(default_factory=lambda: Handoff(size=256))

    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            raise UnknownAgentError(f"no agent named {name!r} is defined in this process") from None


_installed: Registry | None = None


def already_launched_error(live: Registry) -> RuntimeAlreadyLaunchedError:
    return RuntimeAlreadyLaunchedError(
        f"a runtime is already launched in this process ({live!r}); shut it down before launching another",
        detail="DBOS is one per process and finds workflows by name: a second runtime would take over the first's",
    )


def install(registry: Registry) -> None:
    """Make ``registry`` the process's one registry; refused while another is installed."""
    global _installed
    if _installed is not None and _installed is not registry:
        raise already_launched_error(_installed)
    _installed = registry


def uninstall(registry: Registry) -> None:
    """Clear the process's registry if it is ``registry`` (a failed or second launch clears nothing)."""
    global _installed
    if _installed is registry:
        _installed = None


def installed() -> Registry | None:
    return _installed


def current() -> Registry:
    """The launched runtime's registry, for code DBOS calls into (workflows and their steps)."""
    if _installed is None:
        raise ConfigurationError("helix_dbos runtime is not launched in this process (call runtime.launch())")
    return _installed


def env() -> Env:
    """The launched runtime's Env (``current().env``)."""
    return current().env
