"""A launch on a database it cannot use is refused typed, from Python as from the CLI.

``Runtime.launch()`` on a Postgres database that does not exist, a port nobody listens on, a SQLite
path that cannot be opened, or a server that accepts and then says nothing (``tests/support/tcpproxy.py``'s
stall) raises the ``ConfigurationError`` the CLI prints for it, without the driver's exception
chained; a front end (``helix-dbos serve --front-end``) launched while its database stalls exits 2
with that one line. After a refusal the process may launch again.
"""

from __future__ import annotations

import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel
from sqlalchemy.engine import make_url

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError
from tests.support.procs import SETTINGS_VARS, child_env
from tests.support.tcpproxy import TcpProxy
from tests.support.procs import free_port


def _agent() -> hx.Agent:
    return hx.Agent("a", TestModel(call_tools=[]))


def _refusal(url: str, mode: str) -> ConfigurationError:
    runtime = hx.Runtime([_agent()], database_url=url, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as caught:
        runtime.launch()
    exc = caught.value
    frames = [line for line in traceback.format_exception(exc) if line.startswith("  File")]
    assert exc.__cause__ is None and exc.__suppress_context__, "the driver's exception is not chained"
    assert len(frames) <= 3, frames  # launch -> raise, not SQLAlchemy's 37 frames
    return exc


@pytest.fixture
def stalled(pg_url: str) -> Iterator[str]:
    """``pg_url`` through a proxy that accepts connections and forwards nothing."""
    proxy = TcpProxy()
    proxy.stall()
    try:
        yield make_url(pg_url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.restore()
        proxy.close()


@pytest.mark.parametrize("mode", ["process", "client"])
def test_a_missing_postgres_database_is_a_configuration_error(pg_url: str, mode: str) -> None:
    missing = make_url(pg_url).set(database="helix_no_such_db_for_tests").render_as_string(hide_password=False)
    exc = _refusal(missing, mode)
    assert exc.code == "configuration_error" and "does not exist" in exc.message and "createdb" in exc.message, exc.message
    with hx.Runtime([_agent()], database_url=pg_url, mode=mode) as rt:  # type: ignore[arg-type]  # a refusal left nothing behind
        assert rt.engine is not None


@pytest.mark.parametrize("mode", ["process", "client"])
def test_a_closed_port_is_a_configuration_error(mode: str) -> None:
    exc = _refusal(f"postgresql://postgres@127.0.0.1:{free_port()}/helix", mode)
    assert "cannot reach the database server" in exc.message, exc.message


@pytest.mark.parametrize("mode", ["process", "client"])
def test_a_sqlite_file_that_cannot_be_opened_is_a_configuration_error(tmp_path: Path, mode: str) -> None:
    (tmp_path / "a-folder.sqlite").mkdir()  # a folder where the file should be
    exc = _refusal(f"sqlite:///{tmp_path / 'a-folder.sqlite'}", mode)
    assert "cannot open the SQLite file" in exc.message, exc.message


@pytest.mark.parametrize("mode", ["process", "client"])
def test_a_stalled_database_at_launch_is_a_configuration_error_within_the_connect_timeout(stalled: str, mode: str) -> None:
    started = time.monotonic()
    exc = _refusal(stalled, mode)
    assert "cannot reach the database server" in exc.message, exc.message
    assert time.monotonic() - started < 60  # libpq's connect_timeout (10 s) per connection, not for ever


def test_a_front_end_launched_while_its_database_stalls_exits_2_with_one_line(stalled: str, tmp_path: Path) -> None:
    env = child_env(SETTINGS_VARS, {"HELIX_DBOS_DATABASE_URL": stalled, "HELIX_DBOS_PORT": str(free_port())})
    proc = subprocess.run([sys.executable, "-m", "helix_dbos.cli", "serve", "--front-end"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "configuration_error" in proc.stderr and "cannot reach the database server" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "sqlalche.me" not in proc.stderr, proc.stderr
    assert "serving on" not in proc.stderr, proc.stderr
