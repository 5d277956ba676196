"""Importing helix_dbos must not load the service or CLI stacks.

A worker that only recovers runs, and every child process the tests spawn, pays the package's import
at each start; fastapi, uvicorn and typer belong to ``helix_dbos.service`` and ``helix_dbos.cli`` and
must stay behind those modules. (rich is not checked: httpx, imported by pydantic-ai, loads it.)
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY_FOR_SERVICE_AND_CLI = ("fastapi", "uvicorn", "typer", "starlette")


def test_import_helix_dbos_leaves_service_and_cli_stacks_unloaded() -> None:
    code = (
        "import json, sys\n"
        "import helix_dbos\n"
        "from helix_dbos import *  # every public name resolves\n"
        f"print(json.dumps([m for m in {HEAVY_FOR_SERVICE_AND_CLI!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_public_name_is_importable() -> None:
    import helix_dbos

    missing = [name for name in helix_dbos.__all__ if not hasattr(helix_dbos, name)]
    assert missing == []
