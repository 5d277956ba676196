"""``helix-dbos --help`` and every command's ``--help`` answer without loading the runtime's stack.

Importing DBOS, SQLAlchemy and pydantic-ai took the CLI about 5 s per invocation, ``--help`` and
``api-key`` included; they now load inside the commands that use them, so help (and a usage error)
answers in a fraction of a second. A timing would be flaky on a shared machine, so the test holds
the cause instead: the set of modules a help invocation imports. bench/imports.py times it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.procs import ROOT, SETTINGS_VARS, child_env

#: What ``--help`` must not load: the runtime's stack (pydantic too: only the definitions need it).
HEAVY = ("dbos", "pydantic_ai", "sqlalchemy", "psycopg", "alembic", "pydantic", "fastapi", "starlette", "uvicorn", "httpx", "opentelemetry")


def _probe(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(SETTINGS_VARS), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_help_of_the_cli_and_of_every_command_loads_no_heavy_module() -> None:
    code = (
        "import io, json, sys, contextlib\n"
        "import typer.main\n"
        "from helix_dbos.cli.main import app\n"
        "commands = sorted(typer.main.get_command(app).commands)\n"
        "codes, usage = {}, {}\n"
        "for argv in [['--help']] + [[name, '--help'] for name in commands]:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            app(argv, prog_name='helix-dbos')\n"
        "        except SystemExit as exc:\n"
        "            codes[' '.join(argv)] = exc.code\n"
        "    usage[' '.join(argv)] = 'Usage' in buf.getvalue()\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "runtime = sorted(m for m in sys.modules if m.startswith(('helix_dbos.runtime', 'helix_dbos.ledger', 'helix_dbos.definitions', 'helix_dbos.service')))\n"
        "print(json.dumps({'commands': commands, 'codes': codes, 'usage': usage, 'heavy': heavy, 'runtime': runtime}))\n"
    )
    found = _probe(code)
    commands = found["commands"]
    assert isinstance(commands, list) and {"start", "show", "api-key", "serve", "demo", "migrate"} <= set(commands)
    assert set(found["codes"].values()) == {0} and len(found["codes"]) == len(commands) + 1, found["codes"]  # type: ignore[union-attr]
    assert all(found["usage"].values()), found["usage"]  # type: ignore[union-attr]
    assert found["heavy"] == [] and found["runtime"] == [], found


def test_the_commands_still_reach_what_they_import_lazily() -> None:
    """A typed refusal from deep inside a command (the ledger, the session-id rule) still prints as one."""
    env = child_env(SETTINGS_VARS)
    shown = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "show", "a/b", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 1 and json.loads(shown.stdout)["code"] == "validation_error", shown.stderr
    calls = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "calls", "--status", "nope", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert calls.returncode == 1 and "outcome_unknown" in json.loads(calls.stdout)["error"], calls.stderr
