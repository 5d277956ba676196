"""The one object a launched runtime hands down, and the process's one lookup of it.

``Runtime.launch`` makes one ``Registry`` (its ``Env``: agents, engines, settings; its registered
workflows; its executor lock), registers the run and companion workflows *bound to it* (closures
made at registration, ``DBOS.workflow(name=...)``) and hands it to everything it starts. Children
and companions start the run workflow they find here, never one from a module global, so a
workflow is always the function of the registry that registered it.

A run's code is handed what it needs: the run workflow is a closure over its registry
(``workflow.register``), which passes it (or its ``Env``, or the agent) down as an argument to
everything under it, the floor's transaction functions included (``commits``, ``gate``,
``pairing`` take the ``Env``). The one thing not passed by argument is the registry the durable
operations (``durable.tx``, ``plain_tx``, ``off_loop``) run against: their signature is the
transaction function's and its arguments, used from every corner of a run, so the workflow's entry
(``durable.workflow_function``, which holds the registry) sets it once in a ``ContextVar``
(``serving``/``serving_registry``), which every task and worker thread of that execution inherits.

There is no process-wide lookup of it: ``Runtime.launch`` installs its registry (``install``;
``installed()`` only to refuse a second one) and its launched ``Runner`` holds it; the run's code
reads the registry it was handed (the executor lock too: ``registry.lock_held()``), and the durable
operations the ``serving`` one. Tests reach the registry through the runtime they launched.

``install`` refuses a second registry while one is live, so a second ``Runtime`` in one process
fails typed instead of taking over the first's workflows; ``uninstall`` at shutdown lets the next
one launch, and marks the registry ``stopping`` (its workflows' next ledger operation leaves them
``PENDING``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ...definitions import Agent
from ...definitions.limits import AgentLimits
from ...errors import ConfigurationError, RuntimeAlreadyLaunchedError, UnknownAgentError
from ...recovery import Profile
from ...settings import EnvSettings
from ...views import RunResult
from ..process.config import Settings
from .handoff import Handoff
from .records import Preread
from .transcript import TranscriptCache
from .write_queue import GroupKey, GroupQueue

if TYPE_CHECKING:
    from ..process.executor_lock import ExecutorLock


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
    #: The ``HELIX_DBOS_*`` variables as the launch read them (``helix_dbos/settings.py``).
    environment: EnvSettings = field(default_factory=EnvSettings)
    #: Per-agent limits (``definitions/limits.py``): the model request rate is kept by ``flow/model_request``.
    limits: Mapping[str, AgentLimits] = field(default_factory=dict)
    #: What each run driven here has loaded of its transcript (``transcript.TranscriptCache``).
    transcripts: TranscriptCache = field(default_factory=TranscriptCache)
    #: The first model request's read, made by the entry's prepare (by run id: ``handoff.py``).
    prereads: Handoff[str, Preread] = field(default_factory=Handoff)
    #: A run's result as the transaction that brought it to rest read it (by run id: ``handoff.py``).
    settled: Handoff[str, RunResult] = field(default_factory=lambda: Handoff(size=256))

    def agent(self, name: str) -> Agent:
        return agent_named(self.agents, name)


def agent_named(agents: Mapping[str, Agent], name: str) -> Agent:
    """The agent called ``name`` among ``agents``, or the typed error a run of an unknown agent gets."""
    try:
        return agents[name]
    except KeyError:
        raise UnknownAgentError(f"no agent named {name!r} is defined in this process") from None


class Registry:
    """What one launched runtime shares with the workflow code it runs (one per launch)."""

    def __init__(self, env: Env, lock: ExecutorLock | None) -> None:
        self.env = env
        #: The process's executor lock; bodies wait on it before they record or run anything.
        self.lock = lock
        #: Set by ``Runtime.shutdown`` once its grace period is over: from then on a workflow's
        #: next ledger operation raises ``durable.ProcessStopping`` (it stays ``PENDING``).
        self.stopping = False
        #: Group commit's queues (``group_commit.py``), one per (event loop, workflow, run), touched
        #: only on their loop's thread: this launch's own, so two runtimes never share a queue.
        self.group_queues: dict[GroupKey, GroupQueue] = {}
        self._run_workflow: Callable[..., Any] | None = None
        self._companion_workflow: Callable[..., Any] | None = None

    def bind_run_workflow(self, fn: Callable[..., Any]) -> None:
        """Called by ``workflow.register``: the registered ``helix.run`` function, bound to this registry."""
        self._run_workflow = fn

    def bind_companion_workflow(self, fn: Callable[..., Any]) -> None:
        """Called by ``companions.register``: the registered ``helix.companion`` function."""
        self._companion_workflow = fn

    @property
    def run_workflow(self) -> Callable[..., Any]:
        """The run workflow entries, remote children and companion turns are started as."""
        if self._run_workflow is None:
            raise ConfigurationError("the run workflow is registered by runtime.launch(); it was not launched")
        return self._run_workflow

    @property
    def companion_workflow(self) -> Callable[..., Any]:
        if self._companion_workflow is None:
            raise ConfigurationError("the companion workflow is registered by runtime.launch(); it was not launched")
        return self._companion_workflow

    def lock_held(self) -> bool:
        """Whether this process may act for its executor id now (no lock: a bare test setup, yes)."""
        return self.lock is None or self.lock.held()

    def wait_lock_held(self) -> None:
        """Block until the executor lock is held again (or the process exits for a lost lock)."""
        if self.lock is not None:
            self.lock.wait_held()

    def __repr__(self) -> str:
        return f"Registry(executor_id={self.env.settings.executor_id!r}, queue={self.env.queue_name!r})"


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
    """Clear the process's registry if it is ``registry`` (a failed or second launch clears nothing).

    An uninstalled registry is stopping for good: a workflow of it still running leaves its next
    ledger operation to the next launch (``durable.off_loop``)."""
    global _installed
    if _installed is registry:
        registry.stopping = True
        _installed = None


def installed() -> Registry | None:
    return _installed


#: The registry the workflow execution running in this context was entered with: set once, at the
#: workflow's entry (``durable.workflow_function``), inherited by its tasks and worker threads.
_serving: ContextVar[Registry | None] = ContextVar("helix_serving_registry", default=None)


def serving_registry() -> Registry:
    """The registry this workflow execution was entered with (``serving``), for the durable
    operations whose signature is the transaction's own (``durable.tx``, ``plain_tx``, ``off_loop``)."""
    registry = _serving.get()
    if registry is None:
        raise ConfigurationError("ledger operations of a run need the registry its workflow was entered with (durable.workflow_function)")
    return registry


@contextmanager
def serving(registry: Registry) -> Iterator[Registry]:
    """Run the enclosed code (a workflow execution, or a test driving run code directly) for ``registry``."""
    token = _serving.set(registry)
    try:
        yield registry
    finally:
        _serving.reset(token)
