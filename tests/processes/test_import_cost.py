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


def _loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_defining_tools_and_agents_loads_neither_dbos_nor_pydantic_ai() -> None:
    """A module of tool and agent definitions (or ``import helix_dbos``) pays for pydantic only."""
    code = (
        "import helix_dbos as hx\n"
        "@hx.tool(replay='safe')\n"
        "def lookup(city: str) -> str:\n"
        "    return city\n"
        "agent = hx.Agent(name='a', model='test', tools=[lookup])\n"
    )
    assert _loaded_after(code, ("pydantic_ai", "dbos", "sqlalchemy")) == []


def test_the_runtime_loads_pydantic_ai_only_when_a_run_needs_a_message() -> None:
    """``hx.Runtime`` brings DBOS and SQLAlchemy; pydantic-ai (half the import) waits for the first
    message a run reads or writes, so a CLI read or a worker that has nothing to recover skips it."""
    assert _loaded_after("import helix_dbos as hx\nhx.Runtime\nhx.RunHandle\nhx.SessionView\n", ("pydantic_ai",)) == []
    # the registered adapters are loaded with the runtime, their SDKs are not (adapters/base.py)
    assert _loaded_after("import helix_dbos as hx\nhx.Runtime\nimport helix_dbos.adapters\n", ("pydantic_ai", "agents", "openai")) == []
    assert _loaded_after("import helix_dbos as hx\nhx.PydanticAgent\n", ("pydantic_ai",)) == ["pydantic_ai"]


def test_the_openai_agents_adapter_never_imports_the_sdk_unless_handed_its_agent() -> None:
    """The adapter is registered with every runtime, and its policy helpers are public names: neither
    loads ``agents`` (OpenAI's Agents SDK, with ``openai``) for an app that never imported it."""
    code = (
        "import helix_dbos as hx\n"
        "from helix_dbos import *\n"
        "from helix_dbos.adapters import registry\n"
        "registry.adapt([hx.Agent(name='a', model='test')], None, None)\n"
        "hx.openai_policy(replay='safe')\n"
    )
    assert _loaded_after(code, ("agents",)) == []
