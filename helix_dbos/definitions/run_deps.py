"""A run's deps (the SDK's run context), built once per run in each process that runs its steps.

Every adapter keeps the same rule, so it lives once: the factory registered for the agent is fed the
JSON the run's start stored (``deps=``), at home (``home.at_home``: an object such as an asyncpg
connection belongs to the event loop that opened it), and the result is kept for the run's later
steps; without a factory the deps are that JSON. At most ``size`` runs are remembered, oldest first
out: a long-lived worker must not keep every run's deps it ever built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from . import home
from .context import RunScope


class RunDeps:
    __slots__ = ("_by_run", "size")

    def __init__(self, size: int = 256) -> None:
        self._by_run: dict[str, Any] = {}
        self.size = size

    async def get(self, scope: RunScope, factory: Callable[[Any], Any] | None) -> Any:
        if scope.run_id in self._by_run:
            return self._by_run[scope.run_id]
        deps = scope.deps_input if factory is None else await home.at_home(scope.session_id, _made(factory, scope.deps_input))
        if len(self._by_run) >= self.size:
            self._by_run.pop(next(iter(self._by_run)))
        self._by_run[scope.run_id] = deps
        return deps


async def _made(factory: Callable[[Any], Any], data: Any) -> Any:
    deps = factory(data)
    return await deps if inspect.isawaitable(deps) else deps
