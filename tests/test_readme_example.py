"""The README's example, run exactly as printed: fresh, killed mid-email and relaunched, relaunched again.

The code block after ``<!-- readme-example -->`` is written to a file unchanged and run in a
subprocess on the test database. The crash is real (``HELIX_DBOS_CRASH_AT`` exits the process right
after the email body returned); the relaunched script must wait for the recovered session rather
than start a new one, and the outbox (an fsync-free file outside the runtime, appended by the body)
must hold exactly one email.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helix_dbos.runtime.faults import CRASH_EXIT_CODE
from tests.procs import SETTINGS_VARS, child_env

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- readme-example -->\n```python\n(.*?)```", text, re.S)
    assert match, "README has no example after <!-- readme-example -->"
    return match.group(1)


def run(workdir: Path, db_url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = child_env((*SETTINGS_VARS, "OPENAI"))
    env.update(HELIX_DBOS_DATABASE_URL=db_url, **extra)
    return subprocess.run([sys.executable, "example.py"], cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False)


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
