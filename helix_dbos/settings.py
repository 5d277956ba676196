"""Internal: every environment variable helix-dbos reads, read here and nowhere else, into one frozen object.

Why one module: the variables were read in seventeen places, each with its own parsing and its
own idea of a bad value (one warned and went on, others raised later, in a thread), and the docs'
table drifted from the defaults. Here each is a field of ``EnvSettings`` that names its variable,
its default and its meaning (``dataclasses.field`` metadata), so docs/operations.md's table is
checked against this class (tests/runtime/test_settings_docs.py) and a bad value is a
``ConfigurationError`` naming the variable when the object is built: at a ``Runtime``'s
construction and launch, the service's start, a CLI command's start, never later in a run.

Code that holds a launched runtime gets the object the launch read (``Env.environment``); code
that runs before any runtime exists (the service's and the CLI's start, the loader) calls
``from_environ()``. Only the fault-injection points are read at each check (``read_one``): tests
arm them in a running process between runs. Writers that set a variable for a child process (the
CLI's ``serve`` for the app it imports) stay where they are; what the child reads comes back here.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from .errors import ConfigurationError

#: ``process``: entries start their runs here (the default); ``client``: a front end that only admits
#: and enqueues (no DBOS launch: it runs nothing); ``worker``: serves the run queues (docs/scaling.md).
Mode = Literal["process", "client", "worker"]
MODES: tuple[Mode, ...] = ("process", "client", "worker")

DEFAULT_APP = "helix_dbos.examples:runtime"
DEFAULT_STORE_RETRY_WINDOW = 60.0
#: How often DBOS's internal queue is polled, except for the first 5 s of a launch that finds
#: pending runs of its executor (polled every 0.05 s then: polling.InternalQueuePolling). The queue
#: carries recovery handoffs (a takeover, ``recover --executor``) and DBOS's own ``dbos workflow
#: resume/fork``: each starts within one poll. 3 s, not DBOS's 1 s: at 1 s this poll alone costs
#: an idle worker about 2 statements a second (3 s: about 0.7); the price is a takeover about 1 s
#: later on average (measured by ``python -m bench --sections idle,takeover``: docs/operations.md).
DEFAULT_RECOVERY_POLL = 3.0
#: The lease: seconds a holder may go unconfirmed before it counts as gone (executor_lock.py).
DEFAULT_LEASE = 30.0
#: Seconds between two lease renewals (the watchdog confirms the lock more often while it works; the
#: lease row is written only this often), at most a third of the lease: with the default 30 s lease a
#: worker misses two renewals before its lease lapses.
DEFAULT_RENEW_INTERVAL = 10.0
#: A companion with no turn for this long ends (its next turn starts its next incarnation).
DEFAULT_COMPANION_IDLE_SECONDS = 24 * 3600.0

Parser = Callable[[str, str], Any]


def _text(name: str, raw: str) -> str:
    return raw


def _stripped(name: str, raw: str) -> str:
    return raw.strip()


def _words(name: str, raw: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be 1/true/yes/on or 0/false/no/off, not {raw!r}")


def _seconds(low: float, high: float = math.inf) -> Parser:
    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"{name} must be a number of seconds, not {raw!r}") from None
        if not (low <= value <= high) or math.isinf(value):
            bounds = f"from {low:g} to {high:g}" if high != math.inf else f">= {low:g} (and finite)"
            raise ConfigurationError(f"{name} must be a number of seconds {bounds}, not {raw!r}")
        return value

    return parse


def _positive_seconds(name: str, raw: str) -> float:
    value: float = _seconds(0.0)(name, raw)
    if value <= 0:
        raise ConfigurationError(f"{name} must be a number of seconds > 0, not {raw!r}")
    return value


def _integer(low: int, high: int) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigurationError(f"{name} must be an integer, not {raw!r}") from None
        if not low <= value <= high:
            raise ConfigurationError(f"{name} must be from {low} to {high}, not {raw!r}")
        return value

    return parse


def _mode(name: str, raw: str) -> Mode:
    value = raw.strip()
    for mode in MODES:
        if value == mode:
            return mode
    raise ConfigurationError(f"{name} must be one of {', '.join(MODES)}, not {raw!r}")


def _var(env: str, meaning: str, parse: Parser = _text, *, default_text: str | None = None, fallback: str | None = None) -> dict[str, Any]:
    """A field's metadata: its variable, its one-line meaning (the docs table's first words), how
    its text becomes a value, the docs' wording of a default that is not a plain value, and a
    second variable read when the first is unset (``PORT``, as platforms set it)."""
    return {"env": env, "meaning": meaning, "parse": parse, "default_text": default_text, "fallback": fallback}


@dataclass(frozen=True)
class EnvSettings:
    """What the process's environment says, parsed and checked; unset or empty means the default."""

    # --- where and who: the runtime's launch (runtime/process/config.py resolves them with its arguments)
    database_url: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_DATABASE_URL", "the database URL when `Runtime(database_url=)` names none", _stripped,
        default_text="`dbos-config.yaml`'s, else `sqlite:///helix_dbos.sqlite`"))
    config_file: str = field(default="dbos-config.yaml", metadata=_var(
        "HELIX_DBOS_CONFIG", "the DBOS config file whose `system_database_url` is the database URL when neither `Runtime(database_url=)` nor `HELIX_DBOS_DATABASE_URL` names one", _stripped))
    executor_id: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_EXECUTOR_ID", "this process's executor id when `Runtime(executor_id=)` names none", _stripped,
        default_text="`<hostname>-<n>`, the host's first free slot"))
    dbos_vmid: str | None = field(default=None, metadata=_var(
        "DBOS__VMID", "DBOS's own executor id variable, which wins over every other", _stripped, default_text="unset"))
    app_version: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_APP_VERSION", "the application version runs are recorded under when `Runtime(application_version=)` names none", _stripped,
        default_text="`helix-dbos-1`"))
    dbos_app_version: str | None = field(default=None, metadata=_var(
        "DBOS__APPVERSION", "DBOS's own application version variable, which wins over every other", _stripped, default_text="unset"))
    mode: Mode = field(default="process", metadata=_var(
        "HELIX_DBOS_MODE", "the process's shape when `Runtime(mode=)` names none: `process`, `client` (a front end) or `worker`", _mode))
    replace_limits: bool = field(default=False, metadata=_var(
        "HELIX_DBOS_REPLACE_LIMITS", "this launch's agent limits replace the fleet's record for its application version instead of being refused `limits_mismatch` (a limit changed on purpose)", _flag))
    app: str = field(default=DEFAULT_APP, metadata=_var(
        "HELIX_DBOS_APP", "`package.module:attr`, the runtime (or factory) the service and the CLI load", _stripped))
    # --- how long: leases, polls, retries
    takeover_after: float = field(default=DEFAULT_LEASE, metadata=_var(
        "HELIX_DBOS_TAKEOVER_AFTER", "the lease: seconds without renewal after which an executor counts as gone", _seconds(0.5, 86400)))
    lease_renew: float | None = field(default=None, metadata=_var(
        "HELIX_DBOS_LEASE_RENEW", "how often the lease row is written", _seconds(0.0),
        default_text=f"{DEFAULT_RENEW_INTERVAL:g} s (at most lease / 3)"))
    recovery_poll: float = field(default=DEFAULT_RECOVERY_POLL, metadata=_var(
        "HELIX_DBOS_RECOVERY_POLL", "how often DBOS's internal queue is polled", _seconds(0.05, 60)))
    store_retry_window: float = field(default=DEFAULT_STORE_RETRY_WINDOW, metadata=_var(
        "HELIX_DBOS_STORE_RETRY_WINDOW", "how long transient store errors (never a wait for a pooled connection) are retried before a run fails `store_unavailable`", _seconds(0.0)))
    companion_idle_seconds: float = field(default=DEFAULT_COMPANION_IDLE_SECONDS, metadata=_var(
        "HELIX_DBOS_COMPANION_IDLE_SECONDS", "how long a companion waits for its next turn before it ends", _positive_seconds))
    # --- how many connections: the process's pools on Postgres (docs/operations.md, "Database connections")
    api_pool: int | None = field(default=None, metadata=_var(
        "HELIX_DBOS_API_POOL", "connections of the API pool (entries, answers, reads, leases, transactional bodies) when `Runtime(api_pool=)` names none", _integer(1, 1000),
        default_text="5; a front end's 10"))
    tx_pool: int | None = field(default=None, metadata=_var(
        "HELIX_DBOS_TX_POOL", "connections of the workflows' ledger-transaction pool when `Runtime(tx_pool=)` names none", _integer(1, 1000),
        default_text="10, at most 2 x `worker_concurrency`"))
    dbos_pool: int | None = field(default=None, metadata=_var(
        "HELIX_DBOS_DBOS_POOL", "connections of DBOS's system-database pool when `Runtime(dbos_pool=)` names none", _integer(1, 1000),
        default_text="10"))
    pooler_url: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_POOLER_URL", "a PgBouncer (transaction mode) URL of the same database that the API and ledger-transaction pools connect through when `Runtime(pooler_url=)` names none", _stripped,
        default_text="none: they connect to the database URL"))
    # --- what a run emits
    live_output: bool = field(default=False, metadata=_var(
        "HELIX_DBOS_LIVE_OUTPUT", "model output deltas on the run's DBOS stream when `Runtime(live_output=)` says nothing", _flag))
    otlp_traces_endpoints: tuple[str, ...] = field(default=(), metadata=_var(
        "HELIX_DBOS_OTLP_TRACES_ENDPOINTS", "comma-separated OTLP/HTTP endpoints helix exports each run's trace to", _words))
    log_level: str = field(default="WARNING", metadata=_var(
        "HELIX_DBOS_LOG_LEVEL", "DBOS's log level", _stripped))
    # --- the HTTP service (docs/service.md)
    host: str = field(default="127.0.0.1", metadata=_var(
        "HELIX_DBOS_HOST", "the address the service binds when `--host` names none", _stripped))
    port: int = field(default=8000, metadata=_var(
        "HELIX_DBOS_PORT", "the port the service binds when `--port` names none (then `PORT`)", _integer(0, 65535), fallback="PORT"))
    insecure: bool = field(default=False, metadata=_var(
        "HELIX_DBOS_INSECURE", "serve beyond loopback without authentication (a gateway in front authenticates)", _flag))
    api_keys: str = field(default="", metadata=_var(
        "HELIX_DBOS_API_KEYS", "the hashed API keys the service accepts", _text, default_text="none"))
    authenticate: str = field(default="", metadata=_var(
        "HELIX_DBOS_AUTHENTICATE", "`package.module:function` taking the request, returning its principal", _stripped, default_text="none"))
    allowed_hosts: tuple[str, ...] = field(default=(), metadata=_var(
        "HELIX_DBOS_ALLOWED_HOSTS", "comma-separated Host names the service answers", _words,
        default_text="the bound address and localhost"))
    cors_origins: tuple[str, ...] = field(default=(), metadata=_var(
        "HELIX_DBOS_CORS_ORIGINS", "comma-separated origins allowed cross-origin calls", _words))
    http_threads: int = field(default=64, metadata=_var(
        "HELIX_DBOS_HTTP_THREADS", "threads the service's blocking calls (reads, entries, waits) run in", _integer(1, 10_000)))
    http_log_level: str = field(default="warning", metadata=_var(
        "HELIX_DBOS_HTTP_LOG_LEVEL", "uvicorn's log level", _stripped))
    sse_poll_sec: float = field(default=0.1, metadata=_var(
        "HELIX_DBOS_SSE_POLL_SEC", "how often an event stream polls the ledger for new events", _positive_seconds))
    max_request_bytes: int = field(default=1_048_576, metadata=_var(
        "HELIX_DBOS_MAX_REQUEST_BYTES", "the largest request body the service reads, in bytes (a larger one is a 413 before it is read)", _integer(1024, 1 << 30)))
    max_message_chars: int = field(default=262_144, metadata=_var(
        "HELIX_DBOS_MAX_MESSAGE_CHARS", "the longest user message (and client tool error) an entry takes, in characters", _integer(1, 1 << 30)))
    max_result_bytes: int = field(default=524_288, metadata=_var(
        "HELIX_DBOS_MAX_RESULT_BYTES", "the largest client tool result the service stores, in bytes of its JSON", _integer(2, 1 << 30)))
    # --- fault injection (runtime/process/faults.py): read at each check through ``read_one``
    crash_at: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_CRASH_AT", "`<point>[:<tool>]`: the process exits (97) at that boundary, to prove recovery from a real kill", _stripped,
        default_text="unset"))
    fail_at: str | None = field(default=None, metadata=_var(
        "HELIX_DBOS_FAIL_AT", "`<point>[:<tool>]`: a store error is raised at that point, without a kill", _stripped, default_text="unset"))


def _value(f: Any, environ: Mapping[str, str]) -> Any:
    meta = f.metadata
    for name in (meta["env"], meta["fallback"]):
        if name is None:
            continue
        raw = environ.get(name)
        if raw is not None and raw.strip() != "":
            return meta["parse"](name, raw)
    return f.default


def from_environ(environ: Mapping[str, str] | None = None) -> EnvSettings:
    """The settings from ``environ`` (default: this process's environment, read now);
    ``ConfigurationError`` naming the variable for a value that does not parse."""
    source = os.environ if environ is None else environ
    return EnvSettings(**{f.name: _value(f, source) for f in fields(EnvSettings)})


def read_one(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One field, read now: for the fault points, which tests arm between runs of one process
    (read at every boundary of a run, so the field is found by name, not by listing them all)."""
    return _value(_fields_by_name()[name], os.environ if environ is None else environ)


@functools.cache
def _fields_by_name() -> dict[str, Any]:
    return {f.name: f for f in fields(EnvSettings)}


def variables() -> dict[str, tuple[str, str, str]]:
    """Each variable's field name, default as the docs word it, and meaning (the docs' check)."""
    out: dict[str, tuple[str, str, str]] = {}
    for f in fields(EnvSettings):
        meta = f.metadata
        out[meta["env"]] = (f.name, meta["default_text"] or default_text(f.default), meta["meaning"])
    return out


def default_text(value: object) -> str:
    """A plain default as the docs table writes it: ``30 s``, ``64``, ``off``, ``none``, ``` `text` ```."""
    if value is MISSING or value is None or value == () or value == "":
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g} s"
    if isinstance(value, int):
        return str(value)
    return f"`{value}`"
