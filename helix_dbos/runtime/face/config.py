"""What a ``Runtime`` is configured with: its arguments, checked and completed once, frozen.

Built by ``Runtime.__init__`` from its keyword arguments and the environment read there (the two
defaults taken from it: ``live_output`` and ``store_retry_window``); everything a launch needs
beyond it comes from the environment the launch reads (``launch.py``). Frozen, so a launched
runtime's configuration cannot change behind its back: before launch an operator tool may still
repoint it (``Runtime.database_url = ...``), which builds a new one, checked again; after launch
``Runtime`` refuses (``runtime.py``'s ``Configured``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from ...definitions import Agent
from ...definitions.limits import AgentLimits
from ...errors import ConfigurationError
from ...ledger.names import RUNS_QUEUE
from ...recovery import Profile
from ...settings import DEFAULT_STORE_RETRY_WINDOW, MODES, EnvSettings, Mode
from ..process import polling, queues
from ..process.config import DEFAULT_APP_NAME, resolve_store_retry_window
from ..process.pools import PoolSetting, check_pool

T = TypeVar("T")


def _positive_int(value: object) -> bool:
    return type(value) is int and value >= 1


@dataclass(frozen=True)
class RuntimeConfig:
    """A ``Runtime``'s configuration (``hx.Runtime``'s keyword arguments say what each field means)."""

    #: Every agent by name, sub-agents included (a child run resolves its agent by name).
    agents: dict[str, Agent]
    recovery: Profile = "full"
    #: Best-effort model output deltas on the run's DBOS stream (runtime/flow/live.py).
    live_output: bool = False
    #: None: HELIX_DBOS_DATABASE_URL, dbos-config.yaml, SQLite (process/config.py); an operator
    #: tool (``--db``) may repoint it before launch.
    database_url: str | None = None
    executor_id: str | None = None
    application_version: str | None = None
    app_name: str = DEFAULT_APP_NAME
    queue_name: str = RUNS_QUEUE
    #: The last answer a suspended run awaited continues it.
    auto_continue: bool = True
    #: Whether this process dequeues remote children and companion turns from ``queue_name``
    #: (``of`` says when, by default). False: starts and recovers its own runs only (a worker: serves
    #: its entry queues only). The same rule in every mode: only a run of an agent with such a
    #: sub-agent enqueues there, and the process running it defines that agent, so it serves the queue.
    serve_queue: bool = False
    #: Seconds of transient database errors (outage, dropped connections, busy SQLite) that runs
    #: and waits ride out before failing ``store_unavailable``.
    store_retry_window: float = DEFAULT_STORE_RETRY_WINDOW
    #: Seconds this process may go without confirming its executor lock before it exits (and
    #: another may act for its id); None: HELIX_DBOS_TAKEOVER_AFTER, default 30.
    takeover_after: float | None = None
    #: Watch for gone executors and take over their pending runs (False: only this executor's own).
    takeover: bool = True
    #: Postgres connection pools, a size (or (pool_size, max_overflow), whose overflow churns): the
    #: API engine (callers' entries, answers, reads), the workflows' ledger transactions and DBOS's
    #: system database; None: HELIX_DBOS_*_POOL, else sized from the mode and worker_concurrency at
    #: launch (process/pools.py; the sum: docs/operations.md).
    api_pool: PoolSetting | None = None
    tx_pool: PoolSetting | None = None
    dbos_pool: PoolSetting | None = None
    #: A PgBouncer (transaction mode) in front of the same database, for the API and transaction
    #: pools only: the executor lock (a session lock) and DBOS (its LISTEN) need sessions of their
    #: own, so they keep database_url. None: HELIX_DBOS_POOLER_URL, else database_url.
    pooler_url: str | None = None
    #: The process's shape (``helix-dbos worker`` / ``serve --front-end`` set it before launch); None:
    #: HELIX_DBOS_MODE, else "process" (docs/scaling.md, shape.py).
    mode: Mode | None = None
    #: Per-agent limits that hold across every process on the database (definitions/limits.py).
    limits: dict[str, AgentLimits] = field(default_factory=dict)
    #: Runs one worker runs at once from the entry queues (DBOS worker_concurrency; the same for
    #: every worker: it is the queue's row), and of those, runs of one owner (None: no cap).
    worker_concurrency: int | None = None
    owner_share: int | None = None

    @classmethod
    def of(cls, agents: dict[str, Agent], environment: EnvSettings, *, live_output: bool | None, serve_queue: bool | None,
           store_retry_window: float | None, limits: dict[str, AgentLimits] | None, **arguments: Any) -> RuntimeConfig:
        """The arguments completed by ``environment`` where they say nothing.

        ``serve_queue`` None (auto): only if one of the agents has a remote or companion sub-agent,
        since polling the queue is most of an idle runtime's database traffic (docs/operations.md);
        a process that defines only the child agents says True."""
        return cls(
            agents=agents,
            live_output=live_output if live_output is not None else environment.live_output,
            serve_queue=serve_queue if serve_queue is not None else polling.serves_children_queue(agents.values()),
            store_retry_window=resolve_store_retry_window(store_retry_window, environment),
            limits=dict(limits or {}),
            **arguments,
        )

    def __post_init__(self) -> None:
        """Every field checked, typed: at construction and at each change before launch."""
        if self.recovery not in ("full", "dbos_compat"):
            raise ConfigurationError(f"recovery must be 'full' or 'dbos_compat', not {self.recovery!r}")
        for name in ("api_pool", "tx_pool", "dbos_pool"):
            check_pool(name, getattr(self, name))
        window: object = self.store_retry_window
        if type(window) not in (int, float) or not 0 <= window < math.inf:  # type: ignore[operator]
            resolve_store_retry_window(window, EnvSettings())  # type: ignore[arg-type]  # raises, typed
        if self.takeover_after is not None and not (0.5 <= float(self.takeover_after) <= 86400):
            raise ConfigurationError(f"takeover_after must be from 0.5 to 86400 seconds, not {self.takeover_after!r}")
        if self.mode is not None and self.mode not in MODES:
            raise ConfigurationError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self._check_limits()
        for label, value in (("worker_concurrency", self.worker_concurrency), ("owner_share", self.owner_share)):
            if value is not None and not _positive_int(value):
                raise ConfigurationError(f"{label} must be an int >= 1, not {value!r}")

    def _check_limits(self) -> None:
        """Per-agent limits hold across every process on the database (definitions/limits.py): each
        names an agent defined here, and none sits on a delegation cycle, which could deadlock."""
        for name, lim in self.limits.items():
            if name not in self.agents:
                raise ConfigurationError(f"limits name an agent this runtime does not define: {name!r}")
            if not isinstance(lim, AgentLimits):
                raise ConfigurationError(f"limits[{name!r}] must be an hx.AgentLimits, not {type(lim).__name__}")
        delegates = {name: [sub.agent.name for sub in agent.sub_agents if sub.mode != "local"] for name, agent in self.agents.items()}
        cycles = queues.delegation_cycles(delegates, self.limits)
        if cycles:
            raise ConfigurationError(
                f"max_running on {cycles[0][0]!r} could deadlock: it delegates to itself ({' -> '.join(cycles[0])}), and a parent "
                "holds its slot while it waits for its child, so the children could wait for slots only their parents hold; "
                "limit an agent that is not on a delegation cycle (docs/scaling.md, \"Where it stops\")"
            )


class Configured(Generic[T]):
    """A field of the runtime's ``RuntimeConfig``, as a ``Runtime`` attribute. Set before launch,
    it makes a new configuration (checked again: an operator tool's ``--db`` repoints
    ``database_url``, ``helix-dbos worker`` sets ``mode``); set once launched, it is refused, typed,
    since the launch read the configuration once and a change would silently do nothing."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, runtime: None, owner: type) -> Configured[T]: ...
    @overload
    def __get__(self, runtime: object, owner: type) -> T: ...
    def __get__(self, runtime: Any, owner: type) -> Configured[T] | T:
        if runtime is None:
            return self
        value: T = getattr(runtime._config, self.name)
        return value

    def __set__(self, runtime: Any, value: T) -> None:
        """``runtime``: a ``Runtime`` (its ``_config``, and its ``_launched`` parts or None)."""
        if runtime._launched is not None:
            raise ConfigurationError(f"Runtime.{self.name} is fixed once the runtime is launched; set it before launch()")
        runtime._config = dataclasses.replace(runtime._config, **{self.name: value})
