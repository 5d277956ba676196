"""The one object a launched runtime hands down: its Env, its registered workflows, its executor lock.

``Runtime.launch`` makes one ``Registry``, registers the run and companion workflows *bound to it*
(closures made at registration, ``DBOS.workflow(name=...)``), installs it as the process's one
registry (``state.install``) and hands it to everything it starts. Children and companions start
the run workflow they find here, never one from a module global, so a workflow is always the
function of the registry that registered it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from .state import Env

if TYPE_CHECKING:
    from ..process.executor_lock import ExecutorLock


class Registry:
    """What one launched runtime shares with the workflow code it runs (one per launch)."""

    def __init__(self, env: Env, lock: ExecutorLock | None) -> None:
        self.env = env
        #: The process's executor lock; bodies wait on it before they record or run anything.
        self.lock = lock
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
