"""DBOS's private API behind one door (``helix_dbos/runtime/process/dbos_private.py``).

Two kinds of test. The shape tests fail loudly when a DBOS upgrade moves, renames or reshapes one
of the private names or table columns helix_dbos relies on, against the real installed DBOS and a
real launched runtime (nothing faked). The scan tests hold the rule itself: no other module of
helix_dbos/ or bench/ touches DBOS's internals or its tables, and no other module keeps state in a
module global.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.ledger.engine import is_sqlite
from helix_dbos.runtime.process import dbos_private
from helix_dbos.runtime.floor import registry as state
from helix_dbos.runtime.process import polling
from helix_dbos.settings import from_environ

ROOT = Path(__file__).resolve().parents[2]
DOOR = ROOT / "helix_dbos" / "runtime" / "process" / "dbos_private.py"


# --- shape: each private name still exists and still has the shape used ------------------------------


def test_the_door_was_checked_against_the_installed_dbos() -> None:
    """A DBOS upgrade must come with a re-read of every use in the door (then bump CHECKED_AGAINST)."""
    installed = importlib.metadata.version("dbos")
    assert installed == dbos_private.CHECKED_AGAINST, (
        f"dbos {installed} is installed but helix_dbos/runtime/process/dbos_private.py was checked against "
        f"{dbos_private.CHECKED_AGAINST}: re-read each private use there against the new DBOS source"
    )


def test_every_private_module_attribute_still_exists() -> None:
    from dbos import DBOS, _dbos, _utils

    assert hasattr(_dbos, "_dbos_global_instance"), "dbos._dbos._dbos_global_instance moved"
    assert callable(_dbos._get_dbos_instance), "dbos._dbos._get_dbos_instance moved"
    registry = _dbos._get_or_create_dbos_registry()
    assert isinstance(registry.workflow_info_map, dict), "DBOSRegistry.workflow_info_map is no longer a dict"
    params = inspect.signature(registry._register_internal_queue).parameters
    assert list(params)[:1] == ["name"] and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), params
    assert isinstance(_utils.INTERNAL_QUEUE_NAME, str) and _utils.INTERNAL_QUEUE_NAME
    recover = inspect.signature(DBOS._recover_pending_workflows).parameters
    assert list(recover) == ["executor_ids"], f"DBOS._recover_pending_workflows changed its signature: {list(recover)}"
    queue_params = inspect.signature(_dbos.Queue.__init__).parameters
    assert "polling_interval_sec" in queue_params, "DBOS's Queue no longer takes polling_interval_sec"


def test_the_public_error_alias_is_the_private_module() -> None:
    """``dbos.error`` (public) must keep being DBOS's own error classes, which its workflows raise."""
    from dbos import _error

    assert dbos_private.DBOSWorkflowCancelledError is _error.DBOSWorkflowCancelledError
    assert dbos_private.DBOSWorkflowConflictIDError is _error.DBOSWorkflowConflictIDError


def _agent() -> hx.Agent:
    return hx.Agent("echo", TestModel(custom_output_text="hi"))


def test_the_internal_queue_polls_slow_unless_a_launch_finds_work_and_fast_only_for_a_moment(
    make_runtime: Callable[..., hx.Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch with nothing pending polls DBOS's internal queue at the slow interval (an idle
    worker's cost); the fast moment a launch with a backlog gets (``InternalQueuePolling.fast``)
    polls fast, then slow again."""
    from dbos import _dbos, _utils

    monkeypatch.setattr(polling, "FAST_RECOVERY_SECONDS", 0.3)
    rt = make_runtime([_agent()])
    queue = _dbos._get_or_create_dbos_registry().internal_queue_map[_utils.INTERNAL_QUEUE_NAME]
    slow = from_environ().recovery_poll
    assert slow > polling.FAST_RECOVERY_POLL
    assert queue._polling_interval_sec == slow
    polled = rt._launched.runner.polling  # type: ignore[union-attr]
    assert polled is not None
    polled.fast()
    assert queue._polling_interval_sec == polling.FAST_RECOVERY_POLL
    deadline = time.monotonic() + 60
    while queue._polling_interval_sec != slow:
        assert time.monotonic() < deadline, "the fast moment never ended"
        time.sleep(0.05)


def test_a_launched_runtime_meets_each_private_use(make_runtime: Callable[..., hx.Runtime], db_url: str) -> None:
    """Each door function against the real DBOS a runtime launched (instance, config, registry,
    internal queue, system engine, recovery), and each DBOS table column the door and bench read."""
    from dbos import _dbos, _utils

    rt = make_runtime([_agent()])
    instance = dbos_private.configured_dbos()
    assert instance is not None and dbos_private.dbos_launched()
    config = dbos_private.dbos_config(instance)
    assert config["system_database_url"] == rt.settings.database_url  # type: ignore[union-attr]
    assert isinstance(dbos_private.system_database_engine(), sa.Engine)

    assert rt._launched is not None and rt._launched.runner is not None
    registry = rt._launched.runner.registry
    assert state.installed() is registry
    assert dbos_private.registered_workflow("helix.run") is registry.run_workflow
    assert dbos_private.registered_workflow("helix.companion") is registry.companion_workflow
    assert dbos_private.registered_workflow("no.such.workflow") is None
    # the internal queue whose interval the runtime sets really is the one DBOS recovers on (made
    # before DBOS made its own): a launch with nothing pending polls it at the slow interval, and a
    # later interval applies to that same queue object (what a takeover's fast moment does)
    queue = _dbos._get_or_create_dbos_registry().internal_queue_map[_utils.INTERNAL_QUEUE_NAME]
    assert queue._polling_interval_sec == from_environ().recovery_poll
    with rt.engine.connect() as conn:
        assert dbos_private.internal_queue_backlog(conn, rt.executor_id) == 0
    dbos_private.set_internal_queue_polling(0.5)
    assert _dbos._get_or_create_dbos_registry().internal_queue_map[_utils.INTERNAL_QUEUE_NAME] is queue
    assert queue._polling_interval_sec == 0.5

    result = rt.start("echo", "go").result(timeout=120)
    assert result.status == "completed"
    deadline = time.monotonic() + 60  # the ledger is at rest a moment before DBOS records the workflow's end
    while True:
        with rt.engine.connect() as conn:
            status = dbos_private.workflow_status(conn, result.run_id)
        if status == "SUCCESS" or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert status == "SUCCESS"
    with rt.engine.connect() as conn:
        assert dbos_private.workflow_status(conn, "no-such-workflow") is None
        assert dbos_private.pending_workflow_count(conn, rt.executor_id) == 0
        sqlite = is_sqlite(db_url)
        schema = None if sqlite else dbos_private.SYSTEM_SCHEMA
        inspector = sa.inspect(conn)
        for table, used in dbos_private.SYSTEM_COLUMNS.items():
            have = {c["name"] for c in inspector.get_columns(table, schema=schema)}
            assert used <= have, f"DBOS's {table} lost columns helix_dbos reads: {sorted(used - have)}"
            name = dbos_private.system_table(table, sqlite=sqlite)
            conn.execute(sa.text(f"SELECT {', '.join(sorted(used))} FROM {name} WHERE 1 = 0")).all()
    assert dbos_private.recover_pending_workflows(f"{rt.executor_id}-nobody") == []

    rt.shutdown()
    assert dbos_private.configured_dbos() is None and not dbos_private.dbos_launched()


def test_system_table_names_only_the_tables_it_knows() -> None:
    assert dbos_private.system_table("workflow_status", sqlite=True) == "workflow_status"
    assert dbos_private.system_table("workflow_status", sqlite=False) == "dbos.workflow_status"
    with pytest.raises(KeyError):
        dbos_private.system_table("workflow_events", sqlite=False)


# --- scan: the door is the only one -----------------------------------------------------------------

#: What touching DBOS's internals looks like in source: a private module or attribute of DBOS, or SQL
#: naming one of its tables (a schema-qualified literal, or a FROM/JOIN of one).
PRIVATE = [
    re.compile(r"\bdbos\._"),
    re.compile(r"\b(_dbos_global_instance|_dbos_global_registry|_get_or_create_dbos_registry|_get_dbos_instance)\b"),
    re.compile(r"\b(INTERNAL_QUEUE_NAME|_register_internal_queue|workflow_info_map|_recover_pending_workflows|_sys_db)\b"),
    re.compile(r"""["']dbos\.\w+["']"""),
    re.compile(r"\b(FROM|JOIN)\s+(dbos\.)?(workflow_status|operation_outputs|workflow_input|notifications|workflow_events)\b", re.I),
]


def _sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


def _hits(path: Path, patterns: list[re.Pattern[str]]) -> list[str]:
    out = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if any(p.search(line) for p in patterns):
            out.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    return out


def test_the_scan_patterns_catch_what_they_guard() -> None:
    """The scan would catch each kind of use it is there to keep out (so an empty scan means something)."""
    samples = [
        "from dbos._dbos import _get_or_create_dbos_registry",
        "instance = dbos_module._dbos_global_instance",
        "DBOS._recover_pending_workflows([executor_id])",
        'table = "workflow_status" if sqlite else "dbos.workflow_status"',
        'sa.text("SELECT status FROM workflow_status WHERE workflow_uuid = :id")',
        "return _get_dbos_instance()._sys_db.engine",
    ]
    for sample in samples:
        assert any(p.search(sample) for p in PRIVATE), sample


def test_dbos_internals_appear_in_the_door_only() -> None:
    door = _hits(DOOR, PRIVATE)
    assert door, "the door itself should hold the private uses"
    others = [h for p in _sources("helix_dbos", "bench") if p != DOOR for h in _hits(p, PRIVATE)]
    assert others == [], "DBOS's internals used outside helix_dbos/runtime/process/dbos_private.py:\n" + "\n".join(others)


def test_no_module_of_helix_dbos_keeps_state_in_a_global_but_the_one_lookup() -> None:
    """The launched runtime's registry (runtime/floor/registry.py) is the only process state: no ``global``."""
    one = ROOT / "helix_dbos" / "runtime" / "floor" / "registry.py"
    # OpenTelemetry's tracer provider is process-global by its own design (one per process, set
    # once); the exporter's flush state lives beside it, not on a runtime that may never launch
    # (a traced CLI, a shutdown after the registry is gone).
    beside_otel = ROOT / "helix_dbos" / "runtime" / "process" / "trace_export.py"
    # The OpenAI Agents SDK's trace processors are process-global by the SDK's design too: the
    # bridge into helix's trace is registered once per process. The SDK adapter's MCP connections
    # live on one event loop per process (a forked child drops the parent's and opens its own),
    # because the step that lists or calls a server may run in any process.
    sdk_global = [ROOT / "helix_dbos" / "adapters" / "openai_agents" / f for f in ("sdk_tracing.py", "mcp.py")]
    pattern = [re.compile(r"^\s*global\s")]
    others = [h for p in _sources("helix_dbos") if p not in (one, beside_otel, *sdk_global) for h in _hits(p, pattern)]
    assert others == [], "module globals outside runtime/floor/registry.py:\n" + "\n".join(others)
    assert _hits(one, pattern), "registry.py holds the one registry slot"
