"""The audit surface: every SQL query in docs/audit.md runs on both databases against a real ledger.

The ledger is populated the way production fills it: a worker process really crashes mid-tool
(``HELIX_DBOS_CRASH_AT``) and is relaunched, and a human approves one booking and denies another.
"""

from __future__ import annotations

import json

import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

import helix_dbos as hx
from helix_dbos.cli.main import app as cli
from helix_dbos.examples import concierge_agent
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.ledger.migrate import alembic_config, upgrade
from helix_dbos.recovery import OUTCOME_UNKNOWN
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.procs import SETTINGS_VARS, child_env, run_python_m

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "audit.md"
BLOCK = re.compile(r"```sql\n(.*?)```", re.DOTALL)


def documented_queries(dialect: str) -> list[str]:
    """The doc's SQL blocks for one dialect: labelled ones for it, unlabelled ones (prefixes dropped on SQLite)."""
    out = []
    for block in BLOCK.findall(DOC.read_text()):
        first = block.splitlines()[0].strip().lower()
        if first in ("-- postgres", "-- sqlite") and first != f"-- {dialect}":
            continue
        sql = block.strip().rstrip(";")
        if dialect == "sqlite" and first != "-- sqlite":
            sql = re.sub(r"\b(helix|dbos)\.", "", sql)
        out.append(sql)
    return out


def crash_and_wake(db_url: str, workdir: Path) -> str:
    """The demo's worker, killed after the unsafe email's body ran, then relaunched: real recovery."""
    session, executor = uuid.uuid4().hex, f"audit-{uuid.uuid4().hex[:6]}"
    env = child_env(SETTINGS_VARS)
    env["HELIX_DBOS_DEMO_EFFECTS"] = str(workdir / "effects.jsonl")
    env["HELIX_DBOS_DEMO_PAYMENTS"] = str(workdir / "payments.jsonl")  # the provider outlives the worker
    args = [sys.executable, "-m", "helix_dbos.cli", "_demo-worker", "--db", db_url, "--executor", executor, "--session", session]
    # forked from the worker's fork server (tests/support/forkserver.py): real processes, a real crash
    crashed = run_python_m([*args[:4], "start", *args[4:]], {**env, "HELIX_DBOS_CRASH_AT": "after_body:send_email"}, timeout=120)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    woke = run_python_m([*args[:4], "wake", *args[4:]], env, timeout=120)
    assert woke.returncode == 0, woke.stderr[-3000:]
    return session


@pytest.fixture
def populated(db_url: str, tmp_path: Path, make_runtime: Callable[..., hx.Runtime]) -> dict[str, Any]:
    crashed = crash_and_wake(db_url, tmp_path)
    rt = make_runtime([concierge_agent()])
    approved = rt.start("concierge", "dinner in Porto").result(timeout=60)
    receipt = rt.approve(approved.session_id, approved.pending[0].dispatch_id, approved=True, actor="alice")
    assert receipt.run is not None and receipt.run.result(timeout=60).status == "suspended_client_tool"
    denied = rt.start("concierge", "dinner in Rome").result(timeout=60)
    receipt = rt.approve(denied.session_id, denied.pending[0].dispatch_id, approved=False, actor="bob", reason="too pricey")
    assert receipt.run is not None and receipt.run.result(timeout=60).status == "completed"
    waiting = rt.start("concierge", "dinner in Oslo").result(timeout=60)
    return {"crashed": crashed, "approved": approved.session_id, "denied": denied.session_id, "waiting": waiting.session_id}


def run(db_url: str, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(sql), params or {}).mappings()]
    finally:
        engine.dispose()


def test_every_documented_query_runs_and_the_views_hold_the_facts(db_url: str, populated: dict[str, Any]) -> None:
    dialect = "sqlite" if is_sqlite(db_url) else "postgres"
    queries = documented_queries(dialect)
    assert len(queries) >= 15
    answers: dict[str, list[dict[str, Any]]] = {}
    for sql in queries:
        params = {"session_id": populated["crashed"]} if ":session_id" in sql else {}
        answers[sql] = run(db_url, sql, params)

    def answer(marker: str) -> list[dict[str, Any]]:
        [rows] = [rows for sql, rows in answers.items() if marker in sql]
        return rows

    doubtful = answer("attempts > 1 OR status IN")
    email = next(r for r in doubtful if r["tool_name"] == "send_email")
    assert email["status"] == "outcome_unknown" and email["policy"] == "unsafe" and email["attempts"] == 1 and email["lost_attempts"] == 1
    assert email["note"] == OUTCOME_UNKNOWN
    assert all(r["attempts"] > 1 or r["status"] in ("outcome_unknown", "replay_limit_reached") for r in doubtful)
    assert answer("WHERE policy = 'unsafe' AND attempts > 1") == []  # the contract's invariant
    assert answer("HAVING count(*) > 1") == []  # no model request was ever paid twice
    assert sum(r["lost_bodies"] for r in answer("AS lost_bodies")) >= 1

    per_tool = {r["tool_name"]: r for r in answer("AS refused")}
    assert per_tool["send_email"]["lost"] == 1 and per_tool["send_email"]["bodies"] == 1
    assert per_tool["book_table"]["ok"] == 1

    approvals = {(r["actor"], r["tool_name"]): r for r in answer("AS last_decision")}
    assert (approvals[("alice", "book_table")]["approved"], approvals[("alice", "book_table")]["denied"]) == (1, 0)
    assert (approvals[("bob", "book_table")]["approved"], approvals[("bob", "book_table")]["denied"]) == (0, 1)
    assert [r["session_id"] for r in answer("approved IS NULL AND status = 'pending'")] == [populated["waiting"]]

    sessions = {r["session_id"]: r for r in answer("min(agent_name) AS agent")}
    assert sessions[populated["crashed"]]["model_requests"] == 2 and sessions[populated["crashed"]]["total_tokens"] > 0
    models = {r["model"] for r in answer("AS model,")}
    assert models == {"scripted-errands", "scripted-concierge"}

    transcript = answer("AS part_kind")
    kinds = [r["part_kind"] for r in transcript]
    assert kinds[0] == "user-prompt" and kinds.count("tool-call") == 6 and kinds.count("tool-return") == 6
    told = next(r for r in transcript if r["part_kind"] == "tool-return" and r["tool_name"] == "send_email")
    assert "outcome_unknown" in str(told["content"])
    assert [r["status"] for r in answer("approval_actor, result")] == ["ok", "outcome_unknown", "ok", "ok", "ok", "ok"]
    [dbos_run] = answer("dbos.workflow_status" if dialect == "postgres" else "LEFT JOIN workflow_status")
    assert dbos_run["status"] == "completed" and dbos_run["workflow_status"] == "SUCCESS"
    timeline = answer("FROM helix.events" if dialect == "postgres" else "FROM events")
    assert [r["seq"] for r in timeline] == list(range(1, len(timeline) + 1))

    # the views' own columns, beyond what the documented queries pick
    prefix = "" if is_sqlite(db_url) else "helix."
    calls = run(db_url, f"SELECT * FROM {prefix}call_audit WHERE session_id = :s ORDER BY step, position", {"s": populated["crashed"]})
    assert [c["tool_name"] for c in calls] == ["set_preference", "send_email", "reserve_seat", "reserve_seat", "book_venue", "pay_deposit"]
    assert [c["policy"] for c in calls] == ["safe", "unsafe", "safe", "safe", "unsafe", "unsafe"]
    # what proved the outcome of the two calls that never leave doubt
    assert [c["decided_by"] for c in calls] == [None, None, None, None, "database", "check"]
    assert [bool(c["transactional"]) for c in calls] == [False] * 4 + [True, False]
    outcome = calls[5]["check_outcome"]
    assert (json.loads(outcome) if isinstance(outcome, str) else outcome)["verdict"] == "applied"  # JSON text on SQLite
    assert calls[2]["concurrency_group"] == "venue" and calls[1]["dispatch_id"] and calls[1]["run_entry"] == "start"
    assert all(c["model_name"] == "scripted-errands" and c["step_total_tokens"] > 0 for c in calls)
    assert all(c["duration_ms"] is None or c["duration_ms"] >= 0 for c in calls)
    attempts = run(db_url, f"SELECT outcome FROM {prefix}attempt_audit a JOIN {prefix}calls c USING (dispatch_id) WHERE c.session_id = :s", {"s": populated["crashed"]})
    assert "lost" in {a["outcome"] for a in attempts}
    [denied] = run(db_url, f"SELECT approved, approval_actor, approval_reason, status FROM {prefix}call_audit WHERE session_id = :s AND tool_name = 'book_table'", {"s": populated["denied"]})
    assert (bool(denied["approved"]), denied["approval_actor"], denied["approval_reason"], denied["status"]) == (False, "bob", "too pricey", "denied")
    runs = run(db_url, f"SELECT entry, status, calls, model_requests FROM {prefix}run_audit WHERE session_id = :s ORDER BY seq", {"s": populated["approved"]})
    assert [(r["entry"], r["status"]) for r in runs] == [("start", "suspended_client_tool"), ("resume_continue", "suspended_client_tool")]


def test_audit_views_migrate_down_and_up(db_url: str) -> None:
    from alembic import command

    upgrade(db_url)
    prefix = "" if is_sqlite(db_url) else "helix."
    assert run(db_url, f"SELECT count(*) AS n FROM {prefix}call_audit") == [{"n": 0}]
    command.downgrade(alembic_config(db_url), "0001")  # undo everything after the ledger tables, views included
    with pytest.raises(sa.exc.DatabaseError):
        run(db_url, f"SELECT count(*) AS n FROM {prefix}call_audit")
    upgrade(db_url)
    assert run(db_url, f"SELECT count(*) AS n FROM {prefix}run_audit") == [{"n": 0}]


def test_audit_role_reads_and_cannot_write(db_url: str) -> None:
    runner = CliRunner()
    if is_sqlite(db_url):
        out = runner.invoke(cli, ["audit-role", "auditor", "--db", db_url, "--json"])
        assert out.exit_code == 1 and '"code": "validation_error"' in out.stdout
        return
    assert runner.invoke(cli, ["audit-role", "Robert'); DROP", "--db", db_url]).exit_code == 1
    role = f"helix_audit_{uuid.uuid4().hex[:8]}"
    out = runner.invoke(cli, ["audit-role", role, "--password", "s3cret'pw", "--db", db_url, "--json"])
    assert out.exit_code == 0, out.output
    assert "s3cret" not in out.stdout  # the password is never echoed
    reader = create_sync_engine(make_url(db_url).set(username=role, password="s3cret'pw").render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
    try:
        with reader.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM helix.call_audit")).scalar() == 0
            assert conn.execute(sa.text("SELECT count(*) FROM helix.events")).scalar() == 0
            assert conn.execute(sa.text("SELECT count(*) FROM dbos.workflow_status")).scalar() is not None
        with reader.connect() as conn, pytest.raises(sa.exc.DBAPIError, match="read-only|permission denied"):
            conn.execute(sa.text("INSERT INTO helix.stops (run_id, session_id, kind, requested_at) VALUES ('r', 's', 'abort', now())"))
        with reader.connect() as conn, pytest.raises(sa.exc.DBAPIError, match="read-only|permission denied"):
            conn.execute(sa.text("SET default_transaction_read_only = off"))
            conn.execute(sa.text("DELETE FROM helix.sessions"))
        # running it again updates the role instead of failing
        assert runner.invoke(cli, ["audit-role", role, "--db", db_url]).exit_code == 0
    finally:
        reader.dispose()
        admin = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()
