"""Baseline runners for the benchmark, plus `configure_dbos(url)`.

Two ways to run the `bench.workload` agent loop durably, to compare helix_dbos against:

* `bare_dbos` - a hand-written loop on plain DBOS: one async `@DBOS.workflow` per run, one DBOS step per
  model request (reply checkpointed as `ModelMessagesTypeAdapter` JSON), one DBOS step per tool call
  (concurrent via `asyncio.gather`). History lives in workflow memory and is rebuilt on replay.
  At-least-once tools, no ledger: the cheapest correct-ish durable agent loop, i.e. the floor.
* `pydantic_ai_dbos` - the same model script and tool bodies through pydantic-ai's own integration:
  `Agent(..., name=..., capabilities=[DBOSDurability()])` with tools wrapped in `@DBOS.step`
  (pydantic-ai does not make plain function tools durable), run by `agent.run()` inside our own workflow.

Lifecycle (why the factories exist): DBOS keeps a process-global registry of workflows/steps. Switching
databases needs `DBOS.destroy(destroy_registry=True)`, and wrappers decorated against the old registry
keep pointing at the destroyed instance. So workflows and agents are built by factories *after*
`configure_dbos(url, launch=False)` and *before* `DBOS.launch()` (see `bench.harness.setup_runners`).

Run: `python -m bench.baselines --db sqlite|postgres|both -n 20` (delegates to `bench.harness.main`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig
from pydantic_ai import Agent, ModelMessagesTypeAdapter, Tool
from pydantic_ai.direct import model_request
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters

from bench.workload import (
    TOOL_FUNCTIONS,
    ToolFunction,
    WorkloadSpec,
    make_model,
    tool_definitions,
)

APP_NAME = "helix-bench"
APP_VERSION = "helix-bench-1"
"""Pinned: the default version is an MD5 of all workflow source, which would change with every edit."""

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/helix_bench"

Runner = Callable[[], Awaitable[Any]]
"""One benchmark iteration: start one agent run and return its final answer."""


# --------------------------------------------------------------------------------------------------
# DBOS configuration
# --------------------------------------------------------------------------------------------------


def configure_dbos(
    url: str,
    *,
    launch: bool = True,
    reset: bool = True,
    log_level: str = "WARNING",
    executor_id: str | None = None,
    sys_db_pool_size: int | None = None,
    sys_db_nullpool: bool = False,
) -> DBOSConfig:
    """(Re)configure the process-global DBOS against `url` and return the config used.

    * Any previous DBOS is destroyed *with its registry*: a DBOS instance cannot be re-configured in place,
      and a registry left behind would still point its wrappers at the destroyed instance.
      Consequence: build workflows/steps/agents after this call (use `launch=False`, build, `DBOS.launch()`).
    * Postgres (`postgresql[+psycopg]://...`): the database is created if missing.
    * SQLite (`sqlite:///path`): the file is created in WAL mode first (DBOS leaves the default rollback
      journal, which stalls the notification poller), and the poll interval is lowered to 10 ms.
    * `reset`: empty the system tables (`DBOS.reset_system_database(truncate=True)`, keeps the migrated
      schema) so each benchmark database starts clean. Must happen before launch (DBOS asserts).
    * `executor_id`: set it whenever helix_dbos shares this DBOS. `Runtime.launch()` takes the executor
      id from the existing config, so DBOS and the ledger's attempt rows then name the same executor
      (left unset, DBOS says "local" and the runtime locks a host default of its own). Two processes
      sharing a database (the two-worker bench) must each pass a different one.
    """
    DBOS.destroy(destroy_registry=True)
    config: DBOSConfig = {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "system_database_url": url,
        "log_level": log_level,
    }
    if executor_id is not None:
        config["executor_id"] = executor_id
    if sys_db_pool_size is not None:  # the concurrency bench shares a server: see bench/pools.py
        config["sys_db_pool_size"] = sys_db_pool_size
    if sys_db_nullpool:  # the proposed SQLite fix, measured by `--sqlite-sys-nullpool` (docs/benchmarks.md)
        config["db_engine_kwargs"] = {"poolclass": sa.NullPool}
    if url.startswith("sqlite"):
        created = _ensure_sqlite_wal(url)
        config["notification_listener_polling_interval_sec"] = 0.01
    else:
        created = _ensure_pg_database(url)
    DBOS(config=config)
    if reset and not created:  # a brand-new database has nothing to empty (and no tables yet)
        DBOS.reset_system_database(truncate=True)
    if launch:
        DBOS.launch()
    return config


def sqlite_url(path: str) -> str:
    """`sqlite:///` URL for an absolute or relative file path."""
    return f"sqlite:///{os.path.abspath(path)}"


def _ensure_sqlite_wal(url: str) -> bool:
    """Create the SQLite file (and its directory) in WAL mode; returns True if the file is new.

    `journal_mode=WAL` persists in the file, so an existing non-WAL file is converted too.
    """
    path = sa.make_url(url).database
    if not path or path == ":memory:":
        raise ValueError(f"need a file-backed SQLite URL, got {url!r}")
    created = not os.path.exists(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    finally:
        conn.close()
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not put {path} in WAL mode (got {mode!r})")
    return created


def _ensure_pg_database(url: str) -> bool:
    """CREATE DATABASE if missing; returns True if it was created.

    DBOS would create it at launch too, but the truncate-reset runs before launch and needs it to exist.
    """
    parsed = sa.make_url(url)
    name = parsed.database
    if not name:
        raise ValueError(f"no database name in {url!r}")
    admin = sa.create_engine(
        parsed.set(drivername="postgresql+psycopg", database="postgres"), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
            if exists:
                return False
            quoted = admin.dialect.identifier_preparer.quote(name)
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
            return True
    finally:
        admin.dispose()


# --------------------------------------------------------------------------------------------------
# Shared helper
# --------------------------------------------------------------------------------------------------


def as_dbos_step(fn: ToolFunction, step_name: str) -> ToolFunction:
    """A `@DBOS.step` around a *copy* of `fn`.

    DBOS writes its metadata (`dbos_function_name`, func info) onto the decorated function object, so
    decorating the shared workload body directly would leak names between runners. `functools.wraps`
    keeps name, docstring and signature, so pydantic-ai derives the same tool schema as from `fn`.
    """

    @functools.wraps(fn)
    async def body(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    return DBOS.step(name=step_name)(body)


# --------------------------------------------------------------------------------------------------
# (a) bare DBOS
# --------------------------------------------------------------------------------------------------


async def agent_loop(
    prompt: str,
    max_requests: int,
    model_step: Callable[[list[ModelMessage]], Awaitable[str]],
    tools: dict[str, ToolFunction],
) -> str:
    """The hand-written agent loop, parameterized by how a model request and a tool call are executed.

    `model_step` returns the reply as `ModelMessagesTypeAdapter` JSON text, so a durable implementation
    checkpoints a plain string (no pickled pydantic-ai objects) and replay re-validates it like a live reply.
    History lives only in memory: on replay it is rebuilt from the recorded step outputs.
    """
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(prompt)])]
    for _ in range(max_requests):
        response = ModelMessagesTypeAdapter.validate_json(await model_step(messages))[0]
        assert isinstance(response, ModelResponse)
        messages.append(response)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if not calls:
            return response.text or ""
        # Calling a DBOS step wrapper draws its step id synchronously, so creating the coroutines in
        # reply order gives deterministic ids even though they then run concurrently.
        pending = [tools[c.tool_name](**c.args_as_dict()) for c in calls]
        results = await asyncio.gather(*pending)
        messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart(tool_name=c.tool_name, content=r, tool_call_id=c.tool_call_id)
                    for c, r in zip(calls, results)
                ]
            )
        )
    raise RuntimeError(f"model did not answer within {max_requests} requests")


def _model_step_fn(spec: WorkloadSpec) -> Callable[[list[ModelMessage]], Awaitable[str]]:
    """Model request via `pydantic_ai.direct.model_request`, reply serialized to JSON text."""
    model = make_model(spec)
    params = ModelRequestParameters(function_tools=tool_definitions(), allow_text_output=True)

    async def request(messages: list[ModelMessage]) -> str:
        response = await model_request(model, messages, model_request_parameters=params)
        return ModelMessagesTypeAdapter.dump_json([response]).decode()

    return request


def make_bare_dbos_runner(spec: WorkloadSpec) -> Runner:
    """(a) Hand-written durable agent loop on plain DBOS (build after `configure_dbos(..., launch=False)`).

    Per run: 1 async workflow, `spec.model_requests` model steps, `spec.tool_calls` tool steps.
    Step arguments (the history) are not persisted by DBOS, so passing them costs nothing.
    """
    model_step = DBOS.step(name="bench.bare.model_request")(_model_step_fn(spec))
    tools = {name: as_dbos_step(fn, f"bench.bare.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()}

    @DBOS.workflow(name="bench.bare.agent_run")
    async def bare_agent_run(prompt: str) -> str:
        return await agent_loop(prompt, spec.model_requests + 1, model_step, tools)

    async def run() -> str:
        return await bare_agent_run(spec.prompt)

    run.workflow = bare_agent_run  # type: ignore[attr-defined]  # for DBOS.start_workflow / queues
    run.workflow_name = "bench.bare.agent_run"  # type: ignore[attr-defined]
    return run


def make_bare_inmemory_runner(spec: WorkloadSpec) -> Runner:
    """Reference, not durable: the same loop with no DBOS at all (isolates the checkpointing cost of (a))."""
    model_step = _model_step_fn(spec)

    async def run() -> str:
        return await agent_loop(spec.prompt, spec.model_requests + 1, model_step, TOOL_FUNCTIONS)

    return run


# --------------------------------------------------------------------------------------------------
# (b) pydantic-ai DBOS integration
# --------------------------------------------------------------------------------------------------

PAI_AGENT_NAME = "bench_pai"
"""Becomes the DBOS step-name prefix (`bench_pai__model.request`): must be stable."""


def make_pydantic_ai_dbos_runner(spec: WorkloadSpec) -> Runner:
    """Same script and bodies through `DBOSDurability` (build after `configure_dbos(..., launch=False)`).

    The capability registers its model-request step when bound to the agent (at `Agent(...)`), which is
    why the agent is built here, against the current DBOS registry. Function tools are *not* wrapped by
    pydantic-ai; wrapping each in `@DBOS.step` is what its docs prescribe for durable tools.
    """
    tools = [as_dbos_step(fn, f"bench.pai.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()]
    agent = Agent(make_model(spec), name=PAI_AGENT_NAME, tools=tools, capabilities=[DBOSDurability()])

    @DBOS.workflow(name="bench.pai.agent_run")
    async def pai_agent_run(prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output

    async def run() -> str:
        return await pai_agent_run(spec.prompt)

    run.workflow = pai_agent_run  # type: ignore[attr-defined]
    run.workflow_name = "bench.pai.agent_run"  # type: ignore[attr-defined]
    return run


def make_pydantic_ai_plain_runner(spec: WorkloadSpec) -> Runner:
    """Reference, not durable: a plain `Agent` with the plain bodies (isolates pydantic-ai's own cost in (b))."""
    agent = Agent(make_model(spec), tools=[Tool(fn, name=name) for name, fn in TOOL_FUNCTIONS.items()])

    async def run() -> str:
        return (await agent.run(spec.prompt)).output

    return run


BASELINE_FACTORIES: dict[str, Callable[[WorkloadSpec], Runner]] = {
    "bare_dbos": make_bare_dbos_runner,
    "pydantic_ai_dbos": make_pydantic_ai_dbos_runner,
    "bare_inmemory": make_bare_inmemory_runner,
    "pydantic_ai_plain": make_pydantic_ai_plain_runner,
}
"""Registered into `bench.harness` by name; `bare_dbos` is the ratio baseline. The default CLI set is
(a) + (b); the two non-durable references are opt-in (`--runners ...,bare_inmemory,pydantic_ai_plain`)."""
