"""Where the runtime's settings come from, and how DBOS is configured from them.

Resolution order, first hit wins:
- database URL: the ``database_url`` argument, ``HELIX_DBOS_DATABASE_URL``, ``dbos-config.yaml``'s
  ``system_database_url`` (``${VAR}`` substituted; empty means unset), then ``sqlite:///helix_dbos.sqlite``.
- executor id: ``DBOS__VMID`` (DBOS's own), the ``executor_id`` argument, ``HELIX_DBOS_EXECUTOR_ID``,
  then a stable per-host default (see ``executor_lock``).
- application version: ``DBOS__APPVERSION``, the argument, ``HELIX_DBOS_APP_VERSION``, then a
  fixed ``helix-dbos-<major>``: never DBOS's hash of the workflow source, which changes with any
  deploy and strands every pending run.
- store retry window: the ``store_retry_window`` argument, ``HELIX_DBOS_STORE_RETRY_WINDOW``, then
  60 s: how long transient database errors are retried before a run fails ``store_unavailable``.

The variables themselves are read and checked by ``helix_dbos/settings.py`` (``EnvSettings``) where
the process starts (a ``Runtime``'s construction and launch, a CLI command, the service's factory);
each function here is handed the object read there and never reads the environment itself.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ...errors import ConfigurationError
from ...ledger.engine import is_sqlite
from ...ledger.user_json import JsonObject
from ...settings import DEFAULT_STORE_RETRY_WINDOW, EnvSettings
from .pools import Pool

if TYPE_CHECKING:
    from dbos import DBOSConfig

DEFAULT_SQLITE_URL = "sqlite:///helix_dbos.sqlite"
DEFAULT_APP_NAME = "helix-dbos"
DEFAULT_APP_VERSION = "helix-dbos-1"


def _substitute(value: str) -> str:
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), value)


def read_dbos_config(environment: EnvSettings, path: str | Path | None = None) -> JsonObject:
    """``dbos-config.yaml`` from ``path``, ``HELIX_DBOS_CONFIG`` or the working directory; {} if absent."""
    candidate = Path(path or environment.config_file)
    if not candidate.exists():
        return {}
    data = yaml.safe_load(candidate.read_text()) or {}
    return data if isinstance(data, dict) else {}


def resolve_database_url(explicit: str | None, environment: EnvSettings, config: JsonObject | None = None) -> str:
    if explicit:
        return explicit
    if environment.database_url:
        return environment.database_url
    cfg = read_dbos_config(environment) if config is None else config
    raw = cfg.get("system_database_url")
    if isinstance(raw, str) and _substitute(raw).strip():
        return _substitute(raw).strip()
    return DEFAULT_SQLITE_URL


def resolve_app_version(explicit: str | None, environment: EnvSettings) -> str:
    return environment.dbos_app_version or explicit or environment.app_version or DEFAULT_APP_VERSION


def requested_executor_id(explicit: str | None, environment: EnvSettings) -> str | None:
    return environment.dbos_vmid or explicit or environment.executor_id or None


def resolve_store_retry_window(explicit: float | None, environment: EnvSettings) -> float:
    """Seconds of transient store errors a run rides out; a bad value is refused at launch, typed
    (the variable's by ``EnvSettings``, the argument's here)."""
    if explicit is None:
        return environment.store_retry_window
    raw: object = explicit
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigurationError(f"store_retry_window must be a number of seconds, not {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ConfigurationError(f"store_retry_window must be a finite number of seconds >= 0, not {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str
    executor_id: str
    app_version: str
    app_name: str = DEFAULT_APP_NAME
    store_retry_window: float = DEFAULT_STORE_RETRY_WINDOW
    log_level: str = "WARNING"  # DBOS's (HELIX_DBOS_LOG_LEVEL)

    @property
    def sqlite(self) -> bool:
        return is_sqlite(self.database_url)

    def dbos_config(self, pool: Pool | None = None, application_name: str | None = None) -> DBOSConfig:
        """The ``DBOSConfig`` for this runtime: JSON step outputs (SQL-readable), fast polling on
        SQLite; on Postgres, DBOS's system-database pool as ``pool`` (process/pools.py: kept open, no
        overflow unless asked) and its connections named ``application_name``."""
        from dbos import DBOSPortableJSONSerializer

        config: DBOSConfig = {
            "name": self.app_name,
            "system_database_url": self.database_url,
            "application_version": self.app_version,
            "executor_id": self.executor_id,
            "serializer": DBOSPortableJSONSerializer(),
            "enable_otlp": False,
            "log_level": self.log_level,
        }
        # DBOS's OTLP stays off even with HELIX_DBOS_OTLP_TRACES_ENDPOINTS: helix exports the run's
        # spans itself (runtime/process/trace_export.py), and DBOS then opens none of its own.
        if self.sqlite:
            # SQLite has no LISTEN/NOTIFY: recv, events and results poll at this interval.
            config["notification_listener_polling_interval_sec"] = 0.02
            # No pool for DBOS's system database on SQLite: a datasource transaction checks
            # ownership through that pool while holding the file's write lock, and with every pooled
            # connection held by step writers waiting on that lock, both sides waited out
            # busy_timeout and runs failed "database is locked" (docs/benchmarks.md, hot spot 7).
            import sqlalchemy as sa

            config["db_engine_kwargs"] = {"poolclass": sa.NullPool}
        elif pool is not None:
            # DBOS's own defaults (dbos/_dbos_config.py), but the size, and a name in pg_stat_activity;
            # its LISTEN connection comes out of this engine too and carries the same name.
            config["sys_db_pool_size"] = pool.size
            config["db_engine_kwargs"] = {
                "pool_size": pool.size,
                "max_overflow": pool.overflow,
                "pool_timeout": 30,
                "pool_pre_ping": True,
                "connect_args": {"application_name": application_name or self.app_name, "connect_timeout": 10},
            }
        return config
