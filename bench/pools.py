"""Connection budgets for the concurrency bench, on a Postgres server other people use too.

Per process, helix opens its API pool and its workflows' transaction pool (``Runtime(api_pool=,
tx_pool=)``, (pool_size, max_overflow)) and one executor-lock connection, beside DBOS's own
system-database pool. Under a 200-run burst two workers with the defaults would exceed Postgres's
default ``max_connections = 100``, so the bench passes smaller pools (documented in
docs/benchmarks.md); this changes only pool limits, never what a transaction does.
"""

from __future__ import annotations

from typing import Any


#: Pool sizes of each concurrency worker process (kept here, beside the caps, so the worker and
#: the section that starts it share them without importing each other).
WORKER_POOLS: dict[str, Any] = {"dbos": 8, "ds": (8, 0), "sync": (3, 0)}
