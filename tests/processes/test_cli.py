"""The ``helix-dbos`` command, on both databases.

The demo runs end to end as a user runs it (a subprocess that spawns, crashes and relaunches its own
workers). The operating commands run through Typer's runner in this process: the real commands, a
real runtime and database, only without paying a Python start-up per command.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from helix_dbos.cli.main import app as cli
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.recovery import OUTCOME_UNKNOWN
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.procs import SETTINGS_VARS, child_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def wide_console() -> None:
    """Human output is asserted on: give it a wide console, whatever COLUMNS the runner sets
    (pytest-xdist workers get COLUMNS=80, where Rich folds a tool name across two lines)."""
    from helix_dbos.cli import common

    common.console.width = 200
    common.err_console.width = 200

def _head_revision() -> str:
    from alembic.script import ScriptDirectory

    from helix_dbos.ledger.migrate import alembic_config

    return str(ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head())


HEAD = _head_revision()


def clean_env(**extra: str) -> dict[str, str]:
    env = child_env(SETTINGS_VARS)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@pytest.fixture
def helix(monkeypatch: pytest.MonkeyPatch, db_url: str) -> Any:
    """Invoke a command against the test database; returns (exit code, stdout, parsed JSON or None)."""
    monkeypatch.setenv("HELIX_DBOS_APP", "helix_dbos.examples:build_runtime")  # a factory: a fresh runtime per command
    monkeypatch.delenv("HELIX_DBOS_DATABASE_URL", raising=False)
    runner = CliRunner()

    def invoke(*args: str, db: bool = True) -> tuple[int, str, Any]:
        argv = [*args, "--db", db_url] if db else list(args)
        # DBOS binds its log handler to the sys.stderr of its first launch; the runner swaps and
        # closes sys.stderr per invocation, so point the handler back at the real one.
        for handler in logging.getLogger("dbos").handlers:
            if handler.name == "__dbos_console_log_handler__" and isinstance(handler, logging.StreamHandler):
                handler.stream = sys.__stderr__  # not setStream: it flushes the closed one
        result = runner.invoke(cli, argv)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        payload = None
        if "--json" in args:
            payload = json.loads(result.stdout)
        return result.exit_code, result.stdout + (result.stderr or ""), payload

    return invoke


def test_demo_shows_the_recovery_end_to_end(tmp_path: Path) -> None:
    """`helix-dbos demo` as a user runs it: offline, on a fresh SQLite file (its speed is bench's to
    measure, not this test's: on a busy machine it takes what it takes).

    ``--workdir`` keeps the demo's folder (by default a temporary one, removed at the end) so the
    test can read the effect logs and the SQLite file the tools wrote."""
    cwd, kept = tmp_path / "cwd", tmp_path / "demo"
    cwd.mkdir()
    proc = subprocess.run([str(BIN / "helix-dbos"), "demo", "--workdir", str(kept)], cwd=cwd, env=clean_env(COLUMNS="200"), check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for expected in (
        "Saved first:",
        "append checkpoint",
        "worker 1 killed (exit 97) right after send_email's body returned",
        "Worker 2 relaunches with the same executor id",
        "answered outcome_unknown (by recovery): " + OUTCOME_UNKNOWN,
        "paired outcome_unknown: its body ran 1× and will not run again",
        "What the model was told",
        f'outcome_unknown: "{OUTCOME_UNKNOWN}"',
        "The model's next step: Done, except send_email",
    ):
        assert expected in out, f"missing {expected!r} in:\n{out}"
    # the slow safe seat was mid-body at the crash: it ran again under the same dispatch id
    assert re.search(r"reserve_seat \[\w+\] recovery: run_again", out), out
    assert "ran again after the crash (attempt 2, same dispatch id)" in out
    sid, url = re.search(r"Explore: helix-dbos show (\w+) --db (\S+)", out).groups()  # type: ignore[union-attr]
    assert not list(cwd.iterdir())  # the demo wrote nothing to the working directory
    assert Path(url.removeprefix("sqlite:///")).parent == kept

    shown = CliRunner().invoke(cli, ["show", sid, "--db", url, "--json"])
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.stdout)
    calls = view["session"]["calls"]
    email = next(c for c in calls if c["tool_name"] == "send_email")
    assert email["status"] == "outcome_unknown" and len(email["attempts"]) == 1
    by_tool = {c["tool_name"]: c for c in calls if c["tool_name"] != "reserve_seat"}
    assert sorted(len(c["attempts"]) for c in calls if c["tool_name"] == "reserve_seat") == [1, 2]
    assert len(by_tool["set_preference"]["attempts"]) == 1
    workdir = Path(url.removeprefix("sqlite:///")).parent
    bodies = [json.loads(line) for line in (workdir / "effects.jsonl").read_text().splitlines()]
    assert [b["tool"] for b in bodies].count("send_email") == 1
    # the transactional booking, interrupted mid-transaction, left no row: the database decided, it ran again once
    booking = by_tool["book_venue"]
    assert booking["status"] == "ok" and len(booking["attempts"]) == 2 and [b["tool"] for b in bodies].count("book_venue") == 2
    import sqlite3

    with sqlite3.connect(workdir / "helix_demo.sqlite") as db:
        assert db.execute("SELECT count(*) FROM demo_bookings WHERE dispatch_id = ?", (booking["dispatch_id"],)).fetchone() == (1,)
    # the deposit was charged before the kill: the provider said so, it was answered ok with the receipt, never charged twice
    deposit = by_tool["pay_deposit"]
    charges = [json.loads(line) for line in (workdir / "payments.jsonl").read_text().splitlines()]
    assert len(charges) == 1 and deposit["status"] == "ok" and deposit["result"] == charges[0]["receipt"]
    assert [b["tool"] for b in bodies].count("pay_deposit") == 1
    for expected in (
        "[decided by the database]",
        "pay_deposit",
        "asked the outside system about attempt 1: it took effect",
        "Decided by the database: book_venue",
        "Decided by asking the outside system: pay_deposit",
        "The model must decide: send_email",
    ):
        assert expected in out, f"missing {expected!r} in:\n{out}"


def test_demo_uses_helix_dbos_database_url_and_removes_its_folder(db_url: str, tmp_path: Path) -> None:
    """As `demo --help` says, HELIX_DBOS_DATABASE_URL is the default database; its temp folder goes away."""
    temp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    env = clean_env(HELIX_DBOS_DATABASE_URL=db_url, TMPDIR=str(temp))
    proc = subprocess.run([str(BIN / "helix-dbos"), "demo", "--json"], cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["database"] == db_url and out["kept"] is True and out["crashed"] is True
    assert not list(temp.iterdir()) and not list(cwd.iterdir())  # no helix-demo-* folder left, nothing in the cwd
    shown = CliRunner().invoke(cli, ["show", out["session_id"], "--db", db_url, "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["session"]["status"] == out["status"], shown.output


def test_demo_without_a_database_named_anywhere_removes_its_sqlite_folder(tmp_path: Path) -> None:
    """No database named anywhere: a SQLite file in the temp folder, removed with it (once, not per
    database parameter: nothing here depends on one)."""
    temp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    env = clean_env(TMPDIR=str(temp))
    proc = subprocess.run([str(BIN / "helix-dbos"), "demo"], cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--workdir DIR" in proc.stdout and "Explore:" not in proc.stdout
    assert not list(temp.iterdir()) and not list(cwd.iterdir())


def test_operating_a_session_from_the_shell(helix: Any) -> None:
    code, out, run = helix("start", "concierge", "dinner in Porto", "--json")
    assert code == 0, out
    sid = run["session_id"]
    assert run["status"] == "suspended_client_tool" and run["pending"][0]["kind"] == "approval"
    approval = run["pending"][0]["dispatch_id"]

    code, out, rows = helix("sessions", "--json")
    assert code == 0 and sid in {r["session_id"] for r in rows}
    code, out, rows = helix("calls", "--status", "pending", "--tool", "book_table", "--json")
    assert [r["dispatch_id"] for r in rows] == [approval]
    code, out, _ = helix("calls", "--status", "pending")
    assert code == 0 and "book_table" in out
    code, out, err = helix("calls", "--status", "bogus", "--json")
    assert code == 1 and err["code"] == "validation_error"

    code, out, err = helix("resume", sid, "--json")
    assert code == 1 and err["code"] == "calls_pending"
    code, out, _ = helix("resume", sid)
    assert code == 1 and "calls_pending" in out and "waiting for answers" in out

    code, out, answer = helix("approve", sid, approval, "--actor", "alice", "--reason", "ok", "--json")
    assert code == 0, out
    assert answer["run"]["status"] == "suspended_client_tool"
    client = answer["run"]["pending"][0]
    assert client["kind"] == "client"
    code, out, err = helix("approve", sid, approval, "--json")
    assert code == 1 and err["code"] == "duplicate_answer"
    code, out, err = helix("submit", sid, client["dispatch_id"], "--result", "{not json", "--json")
    assert code == 1 and err["code"] == "validation_error"
    code, out, _ = helix("submit", sid, client["dispatch_id"], "--result", '{"calendar_id": "evt-9"}')
    assert code == 0 and "completed" in out and "Your table is booked" in out

    code, out, _ = helix("show", sid)
    assert code == 0
    for expected in ("approved by alice", "awaits approval", "awaits the client", "book_table", "completed", "runs", "timeline"):
        assert expected in out, out
    code, out, view = helix("show", sid, "--json")
    assert view["session"]["status"] == "completed" and [e["seq"] for e in view["events"]] == list(range(1, len(view["events"]) + 1))
    code, out, err = helix("show", "nope", "--json")
    assert code == 1 and err["code"] == "session_not_found"
    code, out, err = helix("retry", sid, "--json")
    assert code == 1 and err["code"] == "nothing_to_resume"

    # stop a suspended run (it stops at once), then retry it: recovery pairs the stopped call
    code, out, run = helix("start", "concierge", "dinner in Rome", "--json")
    other = run["session_id"]
    code, out, stopped = helix("stop", other, "--kind", "interrupt", "--by", "ops", "--json")
    assert code == 0 and stopped["stopped"] is True and stopped["run"]["status"] == "interrupted"
    code, out, err = helix("stop", other, "--json")
    assert code == 1 and err["code"] == "nothing_to_resume"
    code, out, retried = helix("retry", other, "--message", "forget it, dinner in Oslo", "--json")
    assert code == 0 and retried["status"] == "suspended_client_tool", out
    code, out, resumed = helix("resume", other, "--mode", "with_message", "--message", "no dinner after all", "--json")
    assert code == 0 and resumed["status"] == "suspended_client_tool"
    code, out, err = helix("resume", other, "--mode", "from_checkpoint", "--checkpoint", "cp-nope", "--json")
    assert code == 1 and err["code"] == "checkpoint_not_found"
    code, out, err = helix("approve", other, "nope", "--deny", "--json")
    assert code == 1 and err["code"] == "call_not_found"


@pytest.mark.kills
def test_migrate_and_recover_a_dead_executor(helix: Any, db_url: str, tmp_path: Path) -> None:
    code, out, done = helix("migrate", "--json")
    assert code == 0 and done["revision"] == HEAD, out
    code, out, _ = helix("migrate")
    assert code == 0 and f"revision {HEAD}" in out

    # a worker dies mid-tool and nobody relaunches its executor id: an operator takes its runs over
    dead, session = f"dead-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    crashed = subprocess.run(
        [sys.executable, "-m", "helix_dbos.cli", "_demo-worker", "start", "--db", db_url, "--executor", dead, "--session", session],
        cwd=ROOT, env=clean_env(HELIX_DBOS_CRASH_AT="after_body:send_email"), check=False, capture_output=True, text=True, timeout=120,
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    for _ in range(20):  # Postgres frees a killed process's executor lock when it notices the dead socket
        code, out, recovered = helix("recover", "--executor", dead, "--json")
        if code == 0 or recovered.get("code") != "executor_id_in_use":
            break
        time.sleep(0.5)
    assert code == 0, out
    [run] = recovered["runs"]
    assert run["session_id"] == session and run["status"] == "completed"
    code, out, rows = helix("calls", "--session", session, "--tool", "send_email", "--json")
    assert [(r["status"], r["attempts"]) for r in rows] == [("outcome_unknown", 1)]
    code, out, _ = helix("calls", "--status", "outcome_unknown")
    assert code == 0 and "send_email" in out and "may have run" in out


def test_dbos_migrate_runs_the_ledger_migration(db_url: str, tmp_path: Path) -> None:
    """`dbos migrate` (DBOS's CLI, reading dbos-config.yaml) creates DBOS's schema, then runs `helix-dbos migrate`."""
    proc = subprocess.run([str(BIN / "dbos"), "migrate"], cwd=ROOT, env=clean_env(HELIX_DBOS_DATABASE_URL=db_url), check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "helix-dbos migrate" in proc.stdout and f"helix ledger at revision {HEAD}" in proc.stdout
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    prefix = ("", "") if is_sqlite(db_url) else ("helix.", "dbos.")
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT count(*) FROM {prefix[0]}call_audit")).scalar() == 0
            assert conn.execute(sa.text(f"SELECT count(*) FROM {prefix[1]}workflow_status")).scalar() == 0
    finally:
        engine.dispose()


def test_read_commands_on_a_missing_or_unmigrated_database(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = tmp_path / "missing.sqlite"
    result = runner.invoke(cli, ["sessions", "--db", f"sqlite:///{missing}", "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["code"] == "configuration_error"
    assert not missing.exists()  # a read never creates the file
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    result = runner.invoke(cli, ["calls", "--db", f"sqlite:///{empty}", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["code"] == "configuration_error" and "helix-dbos migrate" in result.stdout
