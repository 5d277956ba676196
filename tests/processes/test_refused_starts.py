"""Every refused start of every command that serves exits 2, as docs/service.md and docs/cli.md say.

Not 1 for one entry and 2 for another, not uvicorn's own 3 for a port in use or a runtime that
would not launch, not a traceback with 1 for ``python -m helix_dbos.service --port 99999``: a supervisor or a script tells
"refused to start" from "ran and failed" by the status, so it is one number for all of them.

Real subprocesses of the three entries (``helix-dbos serve``, ``python -m helix_dbos.service``,
``helix-dbos worker``), each refused for each reason that applies to it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import SETTINGS_VARS, child_env
from tests.support.procs import free_port

ENTRIES = {
    "helix-dbos serve": [sys.executable, "-m", "helix_dbos.cli", "serve"],
    "python -m helix_dbos.service": [sys.executable, "-m", "helix_dbos.service"],
    "helix-dbos worker": [sys.executable, "-m", "helix_dbos.cli", "worker"],
}
SERVING = ("helix-dbos serve", "python -m helix_dbos.service")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        yield int(s.getsockname()[1])


def refused(entry: str, tmp_path: Path, env: dict[str, str], *, port: int | None = None, args: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = list(ENTRIES[entry]) + (args or [])
    extra = {"HELIX_DBOS_DATABASE_URL": f"sqlite:///{tmp_path}/r.sqlite", **env}
    if entry in SERVING and port is not None:
        extra["HELIX_DBOS_PORT"] = str(port)
    proc = subprocess.run(cmd, env=child_env(SETTINGS_VARS, extra), cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False)
    return proc


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize(
    "why, env, args",
    [
        ("a setting that does not parse", {"HELIX_DBOS_HTTP_THREADS": "many"}, []),
        ("an app that does not import", {"HELIX_DBOS_APP": "no_such_module_here:runtime"}, []),
        ("an app attribute that is missing", {"HELIX_DBOS_APP": "helix_dbos.examples:no_such_runtime"}, []),
    ],
)
def test_a_refused_start_exits_2(entry: str, why: str, env: dict[str, str], args: list[str], tmp_path: Path) -> None:
    proc = refused(entry, tmp_path, env, port=free_port(), args=args)
    assert proc.returncode == 2, (why, proc.returncode, proc.stderr)
    assert "configuration_error" in proc.stderr and "Traceback" not in proc.stderr, (why, proc.stderr)
    assert "serving on" not in proc.stderr, proc.stderr  # refused before it said it serves


@pytest.mark.parametrize("entry", SERVING)
def test_a_port_in_use_exits_2(entry: str, busy_port: int, tmp_path: Path) -> None:
    args = ["--port", str(busy_port)] if entry == "helix-dbos serve" else []
    proc = refused(entry, tmp_path, {}, port=busy_port, args=args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "address already in use" in proc.stderr, proc.stderr
    assert "serving on" not in proc.stderr, proc.stderr  # it never said it serves


@pytest.mark.parametrize("entry", SERVING)
@pytest.mark.parametrize("how", ["--port 99999", "--host 0.0.0.0 without authentication"])
def test_a_bad_address_exits_2(entry: str, how: str, tmp_path: Path) -> None:
    args = ["--port", "99999"] if how.startswith("--port") else ["--host", "0.0.0.0", "--port", str(free_port())]
    proc = refused(entry, tmp_path, {}, args=args)
    assert proc.returncode == 2, (how, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert ("65535" in proc.stderr) if how.startswith("--port") else ("--insecure" in proc.stderr), proc.stderr


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_database_that_cannot_be_reached_exits_2(entry: str, tmp_path: Path) -> None:
    """The runtime's launch is refused (in the service, inside uvicorn's lifespan): still 2."""
    proc = refused(entry, tmp_path, {"HELIX_DBOS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/helix"}, port=free_port())
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    # one typed line that says what to check, as the CLI's commands print it; not the driver's traceback
    assert "configuration_error" in proc.stderr and "cannot reach the database server" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "sqlalche.me" not in proc.stderr, proc.stderr
    assert "serving on" not in proc.stderr, proc.stderr
