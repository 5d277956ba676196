"""The README's examples, run exactly as printed.

The code block after ``<!-- readme-example -->`` is written to a file unchanged and run in a
subprocess on the test database: fresh, killed mid-email and relaunched, relaunched again. The
pydantic-ai example (``<!-- readme-mcp-server -->`` and ``<!-- readme-pydantic-example -->``, two
files) runs the agent against the MCP server over stdio. The crash is real (``HELIX_DBOS_CRASH_AT`` exits the process right
after the email body returned); the relaunched script must wait for the recovered session rather
than start a new one, and the outbox (an fsync-free file outside the runtime, appended by the body)
must hold exactly one email.
"""

from __future__ import annotations

import pytest

import json
import re
import subprocess
import sys
from pathlib import Path

from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.procs import SETTINGS_VARS, child_env

ROOT = Path(__file__).resolve().parents[2]


def readme_example(tag: str = "readme-example", lang: str = "python") -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- {tag} -->\n```{lang}\n(.*?)```", text, re.S)
    assert match, f"README has no example after <!-- {tag} -->"
    return match.group(1)


def run(workdir: Path, db_url: str, script: str = "example.py", **extra: str) -> subprocess.CompletedProcess[str]:
    env = child_env((*SETTINGS_VARS, "OPENAI"))
    env.update(HELIX_DBOS_DATABASE_URL=db_url, **extra)
    return subprocess.run([sys.executable, script], cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.kills
def test_the_readme_example_runs_as_printed_and_a_relaunch_waits_for_its_session(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "example.py").write_text(readme_example())
    crashed = run(tmp_path, db_url, HELIX_DBOS_CRASH_AT="after_body:send_email")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1

    relaunched = run(tmp_path, db_url)
    assert relaunched.returncode == 0, relaunched.stdout + relaunched.stderr
    assert relaunched.stdout.startswith("completed Done: set_preference {'ok': True}, send_email {'status': 'outcome_unknown'"), relaunched.stdout
    again = run(tmp_path, db_url)
    assert again.returncode == 0 and again.stdout == relaunched.stdout  # the same session, not a new one
    [email] = [json.loads(line) for line in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    assert email["idempotency_key"].startswith("window-seats:")


def _stockist(tmp_path: Path) -> None:
    (tmp_path / "inventory.py").write_text(readme_example("readme-mcp-server"))
    (tmp_path / "stockist.py").write_text(readme_example("readme-pydantic-example"))


def test_the_readme_pydantic_ai_example_runs_as_printed_with_its_mcp_server(db_url: str, tmp_path: Path) -> None:
    _stockist(tmp_path)
    done = run(tmp_path, db_url, "stockist.py")
    assert done.returncode == 0, done.stdout + done.stderr
    email, summary = done.stdout.splitlines()
    assert email.startswith("email to ann@example.com, key ") and email.endswith(": k1 is sold out")  # deps, once
    # the MCP tools' policies came from the server's annotations
    assert summary == "completed Done. [('read_stock', 'safe', 'ok'), ('clear_item', 'unsafe', 'ok'), ('email_buyer', 'unsafe', 'ok')]"


@pytest.mark.kills
def test_the_readme_pydantic_ai_example_killed_mid_destructive_tool_waits_for_its_session(db_url: str, tmp_path: Path) -> None:
    """Killed right after the destructive MCP tool's body, the relaunched script waits for the same
    session: ``clear_item`` is answered ``outcome_unknown`` rather than run again, and the email is
    printed once over both processes."""
    _stockist(tmp_path)
    # unbuffered, so a print made before the kill is not lost with the buffer (os._exit flushes nothing)
    crashed = run(tmp_path, db_url, "stockist.py", HELIX_DBOS_CRASH_AT="after_body:clear_item", PYTHONUNBUFFERED="1")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    relaunched = run(tmp_path, db_url, "stockist.py")
    assert relaunched.returncode == 0, relaunched.stdout + relaunched.stderr
    emails = [ln for ln in (crashed.stdout + relaunched.stdout).splitlines() if ln.startswith("email to ")]
    summary = relaunched.stdout.splitlines()[-1]
    assert summary.startswith("completed Done. [('read_stock', 'safe', 'ok'), ('clear_item', 'unsafe', 'outcome_unknown'), ('email_buyer', 'unsafe', "), summary
    # the email's body ran at most once over both processes (in the killed one it may have been cut
    # off between its attempt and its print: then it is outcome_unknown); answered ok, it ran once
    assert len(emails) <= 1, crashed.stdout + relaunched.stdout
    assert len(emails) == 1 or not summary.endswith("('email_buyer', 'unsafe', 'ok')]"), crashed.stdout + relaunched.stdout
    again = run(tmp_path, db_url, "stockist.py")
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == summary, again.stdout  # the same session, nothing ran
