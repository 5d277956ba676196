"""How many Postgres connections one process holds: its pools, sized once at launch from its settings.

Why a fixed number: pools with overflow opened a connection for each burst of runs and closed it
when the burst passed, so a worker under load opened thousands of backends over a benchmark (and
each open costs the server a fork and an authentication) where a bare DBOS app opened about a
hundred; and an operator could not say how many connections N workers need. Here every pool has
``max_overflow = 0``: its connections are opened once and kept, a burst waits for one (a wait for a
pooled connection is no outage: ``floor/store_retry.py``), and the process's footprint is a sum an
operator can compute before deploying (docs/operations.md, "Database connections").

Each connection carries an ``application_name`` (``helix-dbos:<mode>:<pool>:<executor>``), so
``pg_stat_activity`` tells which process and which pool holds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigurationError
from ...settings import EnvSettings, Mode

#: The API pool: entries, answers, stops, reads and waits, the lease, the takeover watcher, the
#: transactional bodies (one at a time per process) and the ``DBOSClient`` a worker enqueues through.
DEFAULT_API_POOL = 5
#: A front end's API pool: its only pool, every request it serves goes through it.
FRONT_END_API_POOL = 10
#: The workflows' ledger transactions: each run in flight holds one only for a transaction, so more
#: than ten rarely helps a server (they queue on its CPUs instead) and a worker that runs at most
#: ``worker_concurrency`` runs at once needs no more than two each (a run's bodies run side by side).
DEFAULT_TX_POOL = 10
#: DBOS's system-database pool (DBOS's own default is 20): its queue pollers, status writes, steps,
#: events and waits. DBOS retries a checkout that times out, as helix does.
DEFAULT_DBOS_POOL = 10
#: Postgres keeps the first 63 bytes of an ``application_name``.
NAME_LIMIT = 63


@dataclass(frozen=True)
class Pool:
    """A pool's connections: ``size`` kept open, and ``overflow`` more opened for a burst and closed
    after it (0 unless an application asks for it with a ``(size, overflow)`` pair)."""

    size: int
    overflow: int = 0

    @property
    def most(self) -> int:
        return self.size + self.overflow


#: What ``Runtime(api_pool=, tx_pool=, dbos_pool=)`` take: a size, or (size, overflow).
PoolSetting = int | tuple[int, int]


def check_pool(name: str, value: object) -> Pool | None:
    """``value`` as a ``Pool`` (None: unset); ``configuration_error`` for anything else."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return Pool(value)
    if (isinstance(value, tuple) and len(value) == 2 and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
            and value[0] >= 1):
        return Pool(value[0], value[1])
    raise ConfigurationError(f"{name} must be a pool size >= 1 (or (pool_size >= 1, max_overflow >= 0)), not {value!r}")


@dataclass(frozen=True)
class Footprint:
    """The Postgres connections a launched process holds at most, by what holds them.

    ``api``/``tx``: helix's pools; ``dbos``: DBOS's system-database pool; ``listener``: DBOS's
    ``LISTEN`` connection (taken out of its pool, so beside it); ``lock``: the executor lock's own
    connection. A front end has only ``api``. On SQLite every count is 0 (no server)."""

    mode: Mode
    api: Pool
    tx: Pool | None
    dbos: Pool | None
    listener: int
    lock: int

    @property
    def total(self) -> int:
        return self.api.most + sum(p.most for p in (self.tx, self.dbos) if p is not None) + self.listener + self.lock

    @property
    def churns(self) -> bool:
        """Whether a pool has overflow: connections that are opened and closed as load comes and goes."""
        return any(p is not None and p.overflow > 0 for p in (self.api, self.tx, self.dbos))

    def as_dict(self) -> dict[str, int]:
        return {
            "api": self.api.most,
            "tx": self.tx.most if self.tx is not None else 0,
            "dbos": self.dbos.most if self.dbos is not None else 0,
            "listener": self.listener,
            "lock": self.lock,
            "total": self.total,
        }


NO_CONNECTIONS = Footprint("process", Pool(0), None, None, 0, 0)


def api_pool(mode: Mode, explicit: Pool | None, environment: EnvSettings) -> Pool:
    """The API pool: the argument, ``HELIX_DBOS_API_POOL``, then 5 (a front end's: 10)."""
    if explicit is not None:
        return explicit
    if environment.api_pool is not None:
        return Pool(environment.api_pool)
    return Pool(FRONT_END_API_POOL if mode == "client" else DEFAULT_API_POOL)


def tx_pool(explicit: Pool | None, environment: EnvSettings, worker_concurrency: int | None) -> Pool:
    """The ledger-transaction pool: the argument, ``HELIX_DBOS_TX_POOL``, then 10, or twice
    ``worker_concurrency`` where that is less (no more connections than its runs could use)."""
    if explicit is not None:
        return explicit
    if environment.tx_pool is not None:
        return Pool(environment.tx_pool)
    return Pool(min(DEFAULT_TX_POOL, 2 * worker_concurrency) if worker_concurrency else DEFAULT_TX_POOL)


def dbos_pool(explicit: Pool | None, environment: EnvSettings) -> Pool:
    """DBOS's system-database pool: the argument, ``HELIX_DBOS_DBOS_POOL``, then 10."""
    if explicit is not None:
        return explicit
    if environment.dbos_pool is not None:
        return Pool(environment.dbos_pool)
    return Pool(DEFAULT_DBOS_POOL)


def application_name(mode: Mode, pool: str, executor_id: str = "") -> str:
    """``helix-dbos:<mode>:<pool>[:<executor>]``, cut to what Postgres keeps (the executor's tail goes first)."""
    name = f"helix-dbos:{mode}:{pool}" + (f":{executor_id}" if executor_id else "")
    return name[:NAME_LIMIT]


def pooler_url(explicit: str | None, environment: EnvSettings, database_url: str) -> str | None:
    """The URL the API and transaction pools connect through (``Runtime(pooler_url=)``, then
    ``HELIX_DBOS_POOLER_URL``), or None: they connect to ``database_url`` like the rest. Only a
    Postgres URL beside a Postgres database: a SQLite file has no server to pool."""
    url = explicit or environment.pooler_url
    if not url:
        return None
    if not url.startswith("postgresql") or not database_url.startswith("postgresql"):
        raise ConfigurationError(f"pooler_url must be a postgresql:// URL beside a Postgres database URL, not {url!r}")
    return url


#: What a connection through a transaction-mode pooler must not do: psycopg prepares a statement
#: it has run five times on the server session it ran on, and the next transaction may get another
#: one (PgBouncer before 1.21 does not carry prepared statements across: "prepared statement
#: _pg3_1 already exists" without this).
POOLER_CONNECT_ARGS = {"prepare_threshold": None}
