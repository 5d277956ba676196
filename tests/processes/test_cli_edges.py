"""The CLI's rough edges a new user hit: bad --db, Rich markup in user data, answers, id prefixes, flags.

The commands run through Typer's runner on the real test database (SQLite and Postgres), as in
test_cli.py; a refusal must be a typed error with a hint that fits, never a traceback, and must
change nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import typer
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from helix_dbos import apikeys
from helix_dbos.cli.main import app as cli
from helix_dbos.ledger import sessions as session_rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.conftest import one_database
from tests.support.procs import SETTINGS_VARS, child_env, wait_until_serving
from tests.processes.test_cli import helix, wide_console  # noqa: F401 (fixtures)
from tests.processes.test_service import snapshot
from tests.support.procs import free_port


def _refused(args: list[str]) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, (args, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if "--json" in args:
        return json.loads(result.stdout), result.output
    return {}, result.output


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("notaurl", "is not a database URL"),
        ("mysql://u@localhost/db", "PostgreSQL or SQLite, not 'mysql'"),
        ("postgresql://postgres@127.0.0.1:1/helix", "cannot reach the database server"),
    ],
)
def test_a_bad_database_url_is_a_typed_configuration_error(url: str, hint: str, tmp_path: Any) -> None:
    for command in (["sessions"], ["migrate"], ["start", "concierge", "hi"]):
        body, _ = _refused([*command, "--db", url, "--json"])
        assert body["code"] == "configuration_error" and hint in body["error"], (command, body)
        _, text = _refused([*command, "--db", url])
        assert "configuration_error" in text and "Traceback" not in text
    assert not list(tmp_path.iterdir()) and not os.path.exists("db")  # mysql://.../db never became a SQLite file


def test_a_missing_postgres_database_says_to_create_it(pg_url: str) -> None:
    missing = make_url(pg_url).set(database="helix_no_such_db_for_tests").render_as_string(hide_password=False)
    for command in (["sessions"], ["migrate"]):
        body, _ = _refused([*command, "--db", missing, "--json"])
        assert body["code"] == "configuration_error" and "does not exist" in body["error"] and "createdb" in body["error"], body


@one_database  # how the CLI renders what it read, whichever database it came from
def test_user_data_is_never_read_as_rich_markup(helix: Any, db_url: str) -> None:
    """A session id like ``x[/bold]`` (written by an older version, before the session id rule) must print as is."""
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    code, out, _ = helix("migrate")
    assert code == 0, out
    with engine.begin() as conn:
        session_rows.insert_session(conn, "x[/bold]", "[red]agent")
    engine.dispose()
    code, out, _ = helix("sessions")
    assert code == 0, out
    assert "x[/bold]" in out and "[red]agent" in out
    code, out, _ = helix("show", "x[/bold]")  # outside the session id rule: refused, and the refusal prints it as is
    assert code == 1 and "x[/bold]" in out and "validation_error" in out, out

    # show and calls: a real session whose user data carries markup (the message's city lands in the
    # saved call's args; the denial's actor and reason), plus what an older version or another app
    # could have stored (a tool name, a run's output)
    code, out, run = helix("start", "concierge", "Dinner in [red]x[/bold]", "--json")
    assert code == 0, out
    sid, approval = run["session_id"], run["pending"][0]["dispatch_id"]
    code, out, _ = helix("approve", sid, approval, "--deny", "--actor", "[bold]boss", "--reason", "[red]x too dear")
    assert code == 0, out
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(t.calls.update().where(t.calls.c.dispatch_id == approval).values(tool_name="book[/bold]"))
        conn.execute(t.runs.update().where(t.runs.c.session_id == sid).values(output="[red]x booked [/bold]"))
    engine.dispose()
    code, out, _ = helix("show", sid)
    assert code == 0 and "Traceback" not in out, out
    for literal in ('"city":"[red]x[/bold]"', "book[/bold]", "[red]x booked [/bold]", "denied by [bold]boss: [red]x too dear"):
        assert literal in out, (literal, out)
    code, out, _ = helix("calls", "--session", sid)
    assert code == 0 and "book[/bold]" in out and "[red]x too dear" in out, out
    code, out, _ = helix("calls", "--tool", "book[/bold]")
    assert code == 0 and "book[/bold]" in out and "1 call(s)" in out, out


def test_answers_prefixes_and_messages_that_name_flags(helix: Any, db_url: str) -> None:
    code, out, run = helix("start", "concierge", "dinner in Porto", "--json")
    assert code == 0, out
    sid, approval = run["session_id"], run["pending"][0]["dispatch_id"]
    code, out, _ = helix("show", sid[:8])
    assert code == 0 and "book_table" in out
    code, out, _ = helix("resume", sid, "--mode", "continue")
    assert code == 1
    code, out, _ = helix("start", "concierge", "dinner in Lisbon")
    assert "suspended, waiting for an approval" in out

    state = snapshot(db_url)
    for args, flag in (
        (("resume", sid, "--mode", "from_checkpoint"), "--checkpoint"),
        (("resume", sid, "--mode", "with_message"), "--message"),
        (("resume", sid, "--mode", "continue", "--message", "hi"), "--message"),
        (("resume", sid, "--mode", "from_checkpoint", "--checkpoint", "cp", "--message", "m"), "--message"),
        (("retry", sid, "--checkpoint", "cp"), "--message"),
        (("submit", sid, approval), "--result"),
        (("submit", sid, approval, "--result", "1", "--error", "boom"), "not both"),
        (("approve", sid, ""), "ambiguous"),  # every call of the session starts with ""
    ):
        code, out, err = helix(*args, "--json")
        assert code == 1 and err["code"] == "validation_error", (args, err)
        assert flag in err["error"] and "_id=" not in err["error"], (args, err)
    code, out, err = helix("recover", "--executor", "never-was-here", "--json")
    assert code == 1 and err["code"] == "not_found" and "never-was-here" in err["error"]
    assert snapshot(db_url) == state, "a refused command changed the ledger"

    # the 8 characters the tables print are enough
    code, out, answer = helix("approve", sid[:8], approval[:8], "--json")
    assert code == 0, out
    assert answer["dispatch_id"] == approval and answer["run"]["status"] == "suspended_client_tool"
    client = answer["run"]["pending"][0]["dispatch_id"]
    code, out, done = helix("submit", sid[:8], client[:8], "--error", "calendar is down", "--json")
    assert code == 0 and done["dispatch_id"] == client, out


def test_api_key_mints_a_key_whose_entry_the_service_accepts() -> None:
    result = CliRunner().invoke(cli, ["api-key", "ops", "--role", "operator", "--role", "approver", "--json"])
    assert result.exit_code == 0, result.output
    minted = json.loads(result.stdout)
    [entry] = apikeys.parse(minted["entry"])
    assert minted["key"] not in minted["entry"]
    assert apikeys.match([entry], minted["key"]) == entry and entry.principal == "ops" and entry.roles == {"operator", "approver"}
    assert apikeys.match([entry], minted["key"] + "x") is None
    body, _ = _refused(["api-key", "two words", "--json"])
    assert body["code"] == "validation_error"
    # a role written into the name, or two names: the refusal shows what a principal looks like
    for name in ("a:b", "a,b", "a:operator"):
        body, _ = _refused(["api-key", name, "--json"])
        assert body["code"] == "validation_error" and f"the principal {name!r} is not valid" in body["error"], body
        assert "A-Z a-z 0-9 _ . @ + -" in body["error"] and "e.g. alice" in body["error"], body
        assert ("--role" in body["error"]) == (":" in name), body


def test_serve_refuses_all_interfaces_without_authentication(tmp_path: Any) -> None:
    """`helix-dbos serve --host 0.0.0.0` with no keys and no hook: a typed refusal before it listens."""
    env = child_env(SETTINGS_VARS)
    proc = subprocess.run(
        [sys.executable, "-m", "helix_dbos.cli", "serve", "--host", "0.0.0.0", "--port", "1", "--db", f"sqlite:///{tmp_path}/x.sqlite"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr  # a refused start (tests/processes/test_refused_starts.py)
    assert "configuration_error" in proc.stderr and "--insecure" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.sqlite").exists()  # refused before the runtime touched the database


@pytest.mark.kills
def test_serve_says_where_it_listens_and_stops_cleanly_on_ctrl_c(tmp_path: Any) -> None:
    """`helix-dbos serve` prints one line naming its address, /docs and /ui (uvicorn at "warning" says
    nothing), answers /healthz, and a Ctrl-C (SIGINT) ends it with status 0 and no traceback."""
    import signal

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", "--port", str(port), "--db", f"sqlite:///{tmp_path}/s.sqlite"],
        env=child_env(SETTINGS_VARS), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until_serving(proc, f"http://127.0.0.1:{port}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert f"serving on http://127.0.0.1:{port}" in err and "/docs" in err and "/ui" in err, err
    assert "Traceback" not in err, err


def test_cli_md_says_exactly_which_commands_take_db_and_json() -> None:
    """docs/cli.md's "every command but X takes --db ..., every command but Y takes --json", read from
    the docs and checked against the options each registered command declares (hidden internals aside)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    sentence = re.search(r"Every command but `([\w-]+)` takes `--db URL`.*?every command but ((?:`[\w-]+`(?: and )?)+) takes `--json`", text, re.S)
    assert sentence, "docs/cli.md no longer says which commands take --db and --json"
    no_db, no_json = sentence.group(1), sorted(re.findall(r"`([\w-]+)`", sentence.group(2)))
    commands = {name: c for name, c in typer.main.get_command(cli).commands.items() if not c.hidden}  # type: ignore[attr-defined]
    assert no_db in commands and set(no_json) <= set(commands) and len(commands) > 10, sorted(commands)

    def takes(name: str, flag: str) -> bool:
        return any(flag in p.opts for p in commands[name].params)

    assert sorted(n for n in commands if not takes(n, "--db")) == [no_db]
    assert sorted(n for n in commands if not takes(n, "--json")) == no_json


def test_a_demo_worker_past_its_timeout_is_a_typed_run_timeout(tmp_path: Path) -> None:
    """A demo whose worker outlasts ``--timeout`` (a busy machine, a slow real model) ends with the
    typed ``run_timeout`` line and a hint to raise it, not a ``TimeoutExpired`` traceback; a timeout
    that is no positive number is a ``configuration_error`` before anything is spawned. The slow
    model is a real one: ``--model openai:gpt-4o`` against a loopback provider that holds the request."""
    from tests.support.provider_server import Held, Text, provider_server

    with provider_server() as server:
        held = Held(Text("too late"))
        server.always(held)
        env = child_env(SETTINGS_VARS, {"COLUMNS": "400", "OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.url})
        helix_bin = str(Path(sys.executable).parent / "helix-dbos")
        try:
            slow = subprocess.run([helix_bin, "demo", "--model", "openai:gpt-4o", "--timeout", "3"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600, check=False)
        finally:
            held.release.set()
        assert server.requests(), "the demo's worker never asked the provider"
    assert slow.returncode == 1, slow.stdout + slow.stderr
    output = slow.stdout + slow.stderr
    assert "error (run_timeout)" in output and "--timeout" in output, output
    assert "Traceback" not in output and "TimeoutExpired" not in output, output
    _, refused = _refused(["demo", "--timeout", "-1"])
    assert "configuration_error" in refused and "--timeout" in refused, refused


@one_database  # the CLI refuses before anything is read or stored
def test_an_empty_message_is_a_typed_refusal_that_stores_nothing(helix: Any, db_url: str) -> None:
    code, out, run = helix("start", "concierge", "dinner in Porto", "--json")
    assert code == 0, out
    sid = run["session_id"]
    state = snapshot(db_url)
    for args in (("start", "concierge", ""), ("start", "concierge", "", "--session", sid), ("retry", sid, "--message", "")):
        code, out, err = helix(*args, "--json")
        assert code == 1 and err["code"] == "validation_error" and "empty" in err["error"], (args, out)
    assert snapshot(db_url) == state, "an empty message changed the ledger"
    # the runtime refuses it too, whatever door calls it (the service's schema says minLength 1)
    from helix_dbos.errors import ValidationError
    from helix_dbos.examples import build_runtime

    rt = build_runtime()
    for entry in (lambda: rt.start("concierge", ""), lambda: rt.resume(sid, mode="with_message", message=""), lambda: rt.retry(sid, message="")):
        with pytest.raises(ValidationError, match="empty"):
            entry()  # refused before the runtime is even launched
    assert snapshot(db_url) == state


@pytest.mark.parametrize("rich", ["1", "0"])
def test_help_renders_help_as_a_flag(rich: str) -> None:
    """``--help`` is a flag: no command's help shows it (or any flag) taking a ``<bool>`` value."""
    env = {**child_env(SETTINGS_VARS), "TYPER_USE_RICH": rich, "COLUMNS": "120"}
    listing = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "--help"], env={**env, "TYPER_USE_RICH": "1"}, capture_output=True, text=True).stdout
    names = ["", *re.findall(r"^│ ([a-z-]+) ", listing, re.M)]
    assert len(names) > 10, names
    for name in names:
        shown = subprocess.run([sys.executable, "-m", "helix_dbos.cli", *([name] if name else []), "--help"], env=env, capture_output=True, text=True)
        assert shown.returncode == 0, (name, shown.stderr)
        lines = [line for line in shown.stdout.splitlines() if "--help" in line]
        assert lines and all(re.search(r"--help\s+Show this message", line) for line in lines), (name, lines)
        assert "<bool>" not in shown.stdout and "BOOLEAN" not in shown.stdout, name
