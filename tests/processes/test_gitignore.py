"""``.gitignore`` covers every file the documented commands leave in a checkout.

In a scratch repository holding the checkout's ``.gitignore`` and ``dbos-config.yaml``, run what the
README tells a newcomer to run on the default SQLite ledger: ``dbos migrate``, a session through
``helix-dbos start`` (it launches the runtime: the executor lock), ``helix-dbos show`` and the
demo; ``git status`` must then show nothing new. (On Postgres these commands write no files.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.procs import ROOT, SETTINGS_VARS, child_env

BIN = Path(sys.executable).parent


def test_the_documented_commands_leave_nothing_git_sees(tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    repo.mkdir()
    for name in (".gitignore", "dbos-config.yaml"):
        shutil.copy(ROOT / name, repo / name)
    env = child_env(SETTINGS_VARS, {"PATH": f"{BIN}:/usr/bin:/bin", "TMPDIR": str(tmp_path)})

    def run(*argv: str, timeout: float = 180) -> str:
        proc = subprocess.run(list(argv), cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        return proc.stdout

    run("git", "init", "-q")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scratch")
    run(str(BIN / "dbos"), "migrate")
    started = json.loads(run(str(BIN / "helix-dbos"), "start", "concierge", "Dinner in Porto", "--json"))
    run(str(BIN / "helix-dbos"), "show", started["session_id"])
    run(str(BIN / "helix-dbos"), "demo", "--json")
    assert (repo / "helix_dbos.sqlite").exists()  # the commands did write beside the checkout's files
    assert run("git", "status", "--porcelain", "--untracked-files=all") == ""
