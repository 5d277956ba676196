"""The names the database keeps (``helix_dbos/ledger/names.py``) keep their values.

A workflow recorded under ``helix.run`` is recovered only by a process that registers ``helix.run``;
a replay finds a transaction's recorded output only under the name it was recorded with. So a
rename that would orphan what earlier processes recorded fails here, not in production; a
deliberate one comes with a migration of the recorded rows and an edit of ``PINNED``.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.ledger import names
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite

PINNED = {
    "RUN_WORKFLOW": "helix.run",
    "COMPANION_WORKFLOW": "helix.companion",
    "MODEL_STEP": "helix.model",
    "CHILD_WAIT_STEP": "helix.child_wait",
    "RUNS_QUEUE": "helix_runs",
    "ENTRY_QUEUE": "helix_entries",
    "NO_OWNER_PARTITION": "-",
    "TURN_TOPIC": "helix.turn",
    "LIVE_STREAM": "helix.live",
    "PREPARE_TX": "helix.prepare",
    "REPLY_TX": "helix.reply",
    "APPEND_TX": "helix.append",
    "COMMIT_TX": "helix.commit",
    "FAIL_TX": "helix.fail",
    "STOP_TX": "helix.stop",
    "SAVED_CALLS_TX": "helix.saved_calls",
    "DELEGATE_TX": "helix.delegate",
    "DELEGATE_RESULT_TX": "helix.delegate_result",
    "COMPANION_GATE_TX": "helix.companion.gate",
    "COMPANION_RESULT_TX": "helix.companion.result",
    "COMPANION_CLOSE_TX": "helix.companion.close",
    "COMPANION_BEGIN_TX": "helix.companion.begin",
    "COMPANION_END_TX": "helix.companion.end",
    "AGENT_RATE_PREFIX": "agent:",
    "TRANSACTIONAL_LOCK": "helix.transactional",
}

PACKAGE = Path(names.__file__).resolve().parent.parent
#: Where a ``helix.*`` literal may stand: the persisted names, and the span names (not data).
SPELLED_IN = {PACKAGE / "ledger" / "names.py", PACKAGE / "runtime" / "process" / "tracing.py"}
#: A schema-qualified SQL object (its name is the migrations'), not a name DBOS or the ledger records.
SQL_OBJECTS = {"helix.executor_audit"}


def test_every_persisted_name_keeps_its_recorded_value() -> None:
    assert {k: v for k, v in vars(names).items() if k.isupper()} == PINNED
    assert names.agent_rate_key("support") == "agent:support"
    assert names.agent_entry_queue("support") == "helix_entries.support"


def test_the_runtimes_default_queue_is_the_pinned_one() -> None:
    assert inspect.signature(hx.Runtime).parameters["queue_name"].default == names.RUNS_QUEUE


def _helix_literals(path: Path) -> list[str]:
    """Every ``helix.*`` string constant in ``path``, and every one equal to a pinned ``helix_*`` name."""
    found = []
    queues = {v for v in PINNED.values() if v.startswith("helix_")}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (re.fullmatch(r"helix\.[a-z_.]+", node.value) or node.value in queues):
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_spells_a_persisted_name_of_its_own() -> None:
    """A ``helix.*`` name spelled at a ``tx(...)`` call or a registration is a persisted name that
    escaped this pin: every one is imported from ``ledger/names.py``."""
    pinned = {v for v in PINNED.values() if v.startswith("helix")}
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path not in SPELLED_IN:
            stray += [f"{path.relative_to(PACKAGE)}: {hit}" for hit in _helix_literals(path) if hit.rsplit(": ", 1)[1].strip("'") not in SQL_OBJECTS]
    assert stray == []
    assert {hit.rsplit(": ", 1)[1].strip("'") for hit in _helix_literals(PACKAGE / "ledger" / "names.py")} == pinned


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    bad = tmp_path / "spelled.py"
    bad.write_text('async def f(tx):\n    await tx("helix.append", print)\n    await tx("helix_entries", print)\n')
    assert _helix_literals(bad) == ["spelled.py:2: 'helix.append'", "spelled.py:3: 'helix_entries'"]


def _recorded(db_url: str, run_id: str) -> tuple[set[str], set[str], set[str]]:
    """What the database holds for ``run_id``'s workflow, read with plain SQL: its DBOS workflow
    name, the names of its DBOS operations, and the names of its ledger transactions."""
    dbos, ledger = ("", "") if is_sqlite(db_url) else ("dbos.", "helix.")
    engine = create_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            workflows = set(conn.execute(sa.text(f"SELECT name FROM {dbos}workflow_status WHERE workflow_uuid = :w"), {"w": run_id}).scalars())
            ops = set(conn.execute(sa.text(f"SELECT function_name FROM {dbos}operation_outputs WHERE workflow_uuid = :w"), {"w": run_id}).scalars())
            txs = set(conn.execute(sa.text(f"SELECT op FROM {ledger}tx_outputs WHERE workflow_id = :w"), {"w": run_id}).scalars())
    finally:
        engine.dispose()
    return workflows, ops, {op.rpartition("#")[0] for op in txs}


def test_what_a_run_records_is_named_by_the_pinned_names(make_runtime: Any, db_url: str) -> None:
    """A real run with a tool body, both stores: the workflow, its steps and its ledger
    transactions are recorded under names of ``ledger/names.py``, and nothing else named ``helix``."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("send", {"key": "b"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    @hx.tool
    def send(key: str) -> str:
        return key

    rt = make_runtime([hx.Agent("named", FunctionModel(reply), tools=[send])])
    result = rt.start("named", "go").result(timeout=120)
    assert result.status == "completed"
    workflows, ops, txs = _recorded(db_url, result.run_id)
    assert workflows == {names.RUN_WORKFLOW}
    assert {op for op in ops if op.startswith("helix")} <= set(PINNED.values())
    assert {names.PREPARE_TX, names.REPLY_TX, names.APPEND_TX, names.COMMIT_TX} <= txs <= set(PINNED.values()), txs
