"""Operational safety: one live process per executor id, a pinned application version, SQLite in
WAL mode, provider errors retried inside the model step, and what DBOS itself recorded."""

from __future__ import annotations

import json

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import ExecutorIdInUseError
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite, sqlite_path
from helix_dbos.runtime.process.config import DEFAULT_APP_VERSION
from helix_dbos.runtime.process.executor_lock import ExecutorLock


def test_an_executor_id_is_held_by_one_live_process_only(db_url: str) -> None:
    if is_sqlite(db_url):
        sqlite3.connect(sqlite_path(db_url)).close()
    first, second, third = ExecutorLock(db_url), ExecutorLock(db_url), ExecutorLock(db_url)
    try:
        assert first.acquire("worker-a") == "worker-a"
        with pytest.raises(ExecutorIdInUseError):
            second.acquire("worker-a")
        # without an explicit id, a process takes the host's first free default slot
        slot0 = second.acquire(None)
        slot1 = third.acquire(None)
        assert slot0 != slot1 and slot0.endswith("-0") and slot1.endswith("-1")
        first.release()
        assert ExecutorLock(db_url).acquire("worker-a") == "worker-a"  # released with its holder
    finally:
        for lock in (first, second, third):
            lock.release()


def _model(fail_times: int, status: int) -> tuple[FunctionModel, list[int]]:
    asked: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(asked))
        if len(asked) <= fail_times:
            raise ModelHTTPError(status_code=status, model_name="scripted", body={"error": "busy"})
        return ModelResponse(parts=[TextPart("fine")])

    return FunctionModel(reply), asked


def test_retryable_provider_errors_are_retried_inside_the_step(make_runtime: Any) -> None:
    model, asked = _model(fail_times=2, status=429)
    rt = make_runtime([hx.Agent("flaky", model)])
    result = rt.start("flaky", "hi").result(timeout=60)
    assert result.status == "completed" and result.output == "fine"
    assert len(asked) == 3
    assert result.usage.requests == 1  # one recorded model step: its retries are the step's own


def test_a_non_retryable_provider_error_fails_the_run_typed(make_runtime: Any) -> None:
    model, asked = _model(fail_times=5, status=400)
    rt = make_runtime([hx.Agent("broken", model)])
    result = rt.start("broken", "hi").result(timeout=60)
    assert result.status == "failed" and len(asked) == 1
    assert result.error is not None and "400" in result.error


def test_pinned_version_wal_and_json_records(make_runtime: Any, db_url: str) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("echo", {"text": "hi"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    @hx.tool(replay="safe")
    def echo(text: str) -> str:
        """Echo."""
        return text

    rt = make_runtime([hx.Agent("echoer", FunctionModel(reply), tools=[echo])])
    result = rt.start("echoer", "go").result()  # no timeout: waits for the workflow itself, so its last step is recorded
    engine = create_sync_engine(db_url)
    dbos = "" if is_sqlite(db_url) else "dbos."
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text(f"SELECT application_version FROM {dbos}workflow_status WHERE workflow_uuid = :w"), {"w": result.run_id}).scalar_one()
            steps = conn.execute(sa.text(f"SELECT function_name, serialization FROM {dbos}operation_outputs WHERE workflow_uuid = :w ORDER BY function_id"), {"w": result.run_id}).all()
            helix = "" if is_sqlite(db_url) else "helix."
            ledger_ops = conn.execute(sa.text(f"SELECT op, output FROM {helix}tx_outputs WHERE workflow_id = :w ORDER BY created_at, op"), {"w": result.run_id}).all()
            if is_sqlite(db_url):
                assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        engine.dispose()
    assert version == DEFAULT_APP_VERSION  # never DBOS's hash of the source, which any deploy changes
    # One record per fact, all of them the ledger's: a model reply is its ``helix.reply#k`` record
    # (one transaction, before the append), a body its attempt and result rows, so DBOS records no
    # step of the run (its workflow input and output only)
    assert steps == []
    assert [op for op, _ in ledger_ops] == ["helix.prepare#0", "helix.reply#0", "helix.append#0", "helix.commit#0", "helix.reply#1", "helix.commit#1"]
    replies = {op: out if not isinstance(out, str) else json.loads(out) for op, out in ledger_ops if op.startswith("helix.reply")}
    assert [r["step"] for r in replies.values()] == [0, 1] and all("response" in r for r in replies.values())
    assert all(isinstance(out if not isinstance(out, str) else json.loads(out), dict) for _, out in ledger_ops)  # JSON, readable in SQL


def test_concurrent_first_launches_on_one_sqlite_file_migrate_once(tmp_path: Path) -> None:
    """Workers started together on a fresh SQLite file (a rolling deploy's first boot) all migrate
    the ledger without 'table ... already exists': the migration is serialized by a file lock."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    code = "import sys; from helix_dbos.ledger.migrate import upgrade; upgrade(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(code == 0 for code, _ in results), [err[-1500:] for _, err in results]
