"""Connection budgets for the concurrency bench, on a Postgres server other people use too.

Why this exists: per process, helix opens up to 40 datasource connections (pool 20 + overflow 20),
20 on its API engine (10 + 10) and one for the executor lock, beside DBOS's own 20; the runtime
has no setting for any of these. Under a 200-run burst one process reaches ~80 connections, and
two workers exceed Postgres's default `max_connections = 100`: the runs that hit the limit fail
("too many clients already") instead of waiting. The bench caps the pools (documented in
docs/benchmarks.md) by wrapping the two engine factories `Runtime.launch()` calls; this changes
only pool limits, never what a transaction does, and the runs are CPU-bound anyway.
"""

from __future__ import annotations

import functools
from typing import Any

_PATCHED: dict[str, Any] = {}


def cap_helix_pools(ds: tuple[int, int] = (10, 0), sync: tuple[int, int] = (5, 0)) -> None:
    """Cap helix's datasource and API-engine pools at (pool_size, max_overflow).

    Both are made by `create_sync_engine` since 9b74aaf (the datasource passes its own `pool_size`,
    which tells the two apart); an async datasource engine (before 9b74aaf) is capped as `ds` too.
    """
    import sqlalchemy.ext.asyncio as sa_async

    from helix_dbos.runtime import runtime as rt_module

    restore_helix_pools()
    _PATCHED["async"] = sa_async.create_async_engine
    _PATCHED["sync"] = rt_module.create_sync_engine

    @functools.wraps(_PATCHED["async"])
    def create_async_engine(url: Any, **kw: Any) -> Any:
        if "pool_size" in kw:  # Postgres: SQLite's engine takes no pool arguments
            kw["pool_size"], kw["max_overflow"] = ds
        return _PATCHED["async"](url, **kw)

    @functools.wraps(_PATCHED["sync"])
    def create_sync_engine(url: str, **kw: Any) -> Any:
        if not url.startswith("sqlite") and "poolclass" not in kw:
            kw["pool_size"], kw["max_overflow"] = ds if "pool_size" in kw else sync
        return _PATCHED["sync"](url, **kw)

    sa_async.create_async_engine = create_async_engine  # type: ignore[assignment]
    rt_module.create_sync_engine = create_sync_engine  # type: ignore[attr-defined]


def restore_helix_pools() -> None:
    import sqlalchemy.ext.asyncio as sa_async

    from helix_dbos.runtime import runtime as rt_module

    if "async" in _PATCHED:
        sa_async.create_async_engine = _PATCHED.pop("async")
    if "sync" in _PATCHED:
        rt_module.create_sync_engine = _PATCHED.pop("sync")
