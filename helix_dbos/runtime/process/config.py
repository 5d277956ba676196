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
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...ledger.engine import is_sqlite

DEFAULT_SQLITE_URL = "sqlite:///helix_dbos.sqlite"
DEFAULT_APP_NAME = "helix-dbos"
DEFAULT_APP_VERSION = "helix-dbos-1"
DEFAULT_STORE_RETRY_WINDOW = 60.0


def _substitute(value: str) -> str:
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), value)


def read_dbos_config(path: str | Path | None = None) -> dict[str, Any]:
    """``dbos-config.yaml`` from ``path``, ``HELIX_DBOS_CONFIG`` or the working directory; {} if absent."""
    candidate = Path(path or os.environ.get("HELIX_DBOS_CONFIG", "dbos-config.yaml"))
    if not candidate.exists():
        return {}
    data = yaml.safe_load(candidate.read_text()) or {}
    return data if isinstance(data, dict) else {}


def resolve_database_url(explicit: str | None = None, config: dict[str, Any] | None = None) -> str:
    if explicit:
        return explicit
    env = os.environ.get("HELIX_DBOS_DATABASE_URL")
    if env:
        return env
    cfg = read_dbos_config() if config is None else config
    raw = cfg.get("system_database_url")
    if isinstance(raw, str) and _substitute(raw).strip():
        return _substitute(raw).strip()
    return DEFAULT_SQLITE_URL


def resolve_app_version(explicit: str | None = None) -> str:
    return os.environ.get("DBOS__APPVERSION") or explicit or os.environ.get("HELIX_DBOS_APP_VERSION") or DEFAULT_APP_VERSION


def requested_executor_id(explicit: str | None = None) -> str | None:
    return os.environ.get("DBOS__VMID") or explicit or os.environ.get("HELIX_DBOS_EXECUTOR_ID") or None


def resolve_store_retry_window(explicit: float | None = None) -> float:
    """Seconds of transient store errors a run rides out; a bad value is refused at launch, typed."""
    from ...errors import ConfigurationError

    raw: object = explicit if explicit is not None else os.environ.get("HELIX_DBOS_STORE_RETRY_WINDOW") or DEFAULT_STORE_RETRY_WINDOW
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigurationError(f"store_retry_window must be a number of seconds, not {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ConfigurationError(f"store_retry_window must be a finite number of seconds >= 0, not {raw!r}")
    return value


#: How often DBOS's internal queue is polled, except for the first 5 s of a launch that finds
#: pending runs of its executor (polled every 0.05 s then: polling.InternalQueuePolling). The queue
#: carries recovery handoffs (a takeover, ``recover --executor``) and DBOS's own ``dbos workflow
#: resume/fork``: each starts within one poll. 3 s, not DBOS's 1 s: at 1 s this poll alone costs
#: an idle worker about 2 statements a second (3 s: about 0.7); the price is a takeover about 1 s
#: later on average (measured by ``python -m bench --sections idle,takeover``: docs/operations.md).
DEFAULT_RECOVERY_POLL = 3.0


def resolve_recovery_poll() -> float:
    """``HELIX_DBOS_RECOVERY_POLL`` seconds (0.05 to 60); a bad value is refused at launch, typed."""
    from ...errors import ConfigurationError

    raw = os.environ.get("HELIX_DBOS_RECOVERY_POLL") or DEFAULT_RECOVERY_POLL
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigurationError(f"HELIX_DBOS_RECOVERY_POLL must be a number of seconds, not {raw!r}") from None
    if not 0.05 <= value <= 60:
        raise ConfigurationError(f"HELIX_DBOS_RECOVERY_POLL must be from 0.05 to 60 seconds, not {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str
    executor_id: str
    app_version: str
    app_name: str = DEFAULT_APP_NAME
    store_retry_window: float = DEFAULT_STORE_RETRY_WINDOW

    @property
    def sqlite(self) -> bool:
        return is_sqlite(self.database_url)

    def dbos_config(self) -> dict[str, Any]:
        """The ``DBOSConfig`` for this runtime: JSON step outputs (SQL-readable), fast polling on SQLite."""
        from dbos import DBOSPortableJSONSerializer

        config: dict[str, Any] = {
            "name": self.app_name,
            "system_database_url": self.database_url,
            "application_version": self.app_version,
            "executor_id": self.executor_id,
            "serializer": DBOSPortableJSONSerializer(),
            "enable_otlp": False,
            "log_level": os.environ.get("HELIX_DBOS_LOG_LEVEL", "WARNING"),
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
        return config
