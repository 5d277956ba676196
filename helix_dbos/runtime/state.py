"""What the workflow code needs from the launched runtime, reachable without importing the runtime.

DBOS workflows are module-level functions resolved by name on recovery, so they cannot close over
a ``Runtime``; they find the launched one here. One runtime per process, as DBOS is one per process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ..definitions import Agent
from ..errors import ConfigurationError, UnknownAgentError
from ..recovery import Profile
from .config import Settings


@dataclass
class Env:
    agents: dict[str, Agent]
    profile: Profile
    settings: Settings
    #: The workflows' ledger transactions' own pool (``durable.tx``, ``durable.plain_tx``).
    tx_engine: sa.Engine
    engine: sa.Engine
    queue_name: str
    extra: dict[str, Any] = field(default_factory=dict)

    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            raise UnknownAgentError(f"no agent named {name!r} is defined in this process") from None


_env: Env | None = None


def install(env: Env | None) -> None:
    global _env
    _env = env


def env() -> Env:
    if _env is None:
        raise ConfigurationError("helix_dbos runtime is not launched in this process (call runtime.launch())")
    return _env
