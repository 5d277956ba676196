"""A service whose agent's model provider cannot be loaded refuses to start, typed, touching nothing.

Before, it started, answered ``/healthz`` as healthy, and failed every session with ``run_error``
(an ImportError from deep in the first model request). Now ``create_app`` builds every agent's model
first: a missing provider package is a ``ConfigurationError`` naming the agent, the model and the
package, and ``python -m helix_dbos.service`` exits 2 with that sentence before it opens the
database or listens. The provider is one whose package this environment does not have.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite, sqlite_path
from tests.support.procs import ROOT, SETTINGS_VARS, child_env
from tests.support.procs import free_port

#: provider prefix -> the package pydantic-ai needs for it
CANDIDATES = {"anthropic": "anthropic", "groq": "groq", "mistral": "mistralai", "cohere": "cohere"}


@pytest.fixture
def missing() -> tuple[str, str]:
    """A provider whose package is not installed here, and that package."""
    for provider, package in CANDIDATES.items():
        if importlib.util.find_spec(package) is None:
            return provider, package
    pytest.skip(f"every candidate provider package is installed ({', '.join(CANDIDATES.values())})")


@pytest.fixture
def refused_db(db_url: str, tmp_path: Path) -> str:
    """The database a refused start is pointed at: on SQLite a file that does not exist yet (db_url's
    is a copy of a migrated template), so "it created nothing" can be asserted as the file's absence."""
    return f"sqlite:///{tmp_path / 'never-created.sqlite'}" if is_sqlite(db_url) else db_url


def _untouched(db_url: str) -> None:
    path = sqlite_path(db_url) if is_sqlite(db_url) else None
    if path is not None:
        assert not path.exists(), "the refused service created its SQLite database"
        return
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(t.executors)).scalar() == 0, "the refused service launched"
    finally:
        engine.dispose()


def test_create_app_refuses_an_agent_whose_provider_is_missing(refused_db: str, missing: tuple[str, str]) -> None:
    from helix_dbos.service.app import create_app

    provider, package = missing
    fine = hx.Agent(name="local", model="test")
    runtime = hx.Runtime([fine, hx.Agent(name="writer", model=f"{provider}:some-model")], database_url=refused_db)
    with pytest.raises(ConfigurationError) as refused:
        create_app(runtime)
    message = refused.value.message
    assert "'writer'" in message and f"{provider}:some-model" in message and repr(package) in message and "pip install" in message, message
    assert refused.value.detail["agent"] == "writer" and refused.value.detail["package"] == package
    _untouched(refused_db)


def test_create_app_refuses_an_unknown_model(refused_db: str) -> None:
    from helix_dbos.service.app import create_app

    with pytest.raises(ConfigurationError, match=r"'typo'.*no-such-provider:x"):
        create_app(hx.Runtime([hx.Agent(name="typo", model="no-such-provider:x")], database_url=refused_db))
    _untouched(refused_db)


def test_the_service_process_exits_2_with_the_sentence(refused_db: str, tmp_path: Path, missing: tuple[str, str]) -> None:
    provider, package = missing
    (tmp_path / "missing_provider_app.py").write_text(textwrap.dedent(f"""
        import helix_dbos as hx
        runtime = hx.Runtime([hx.Agent(name="writer", model="{provider}:some-model")])
    """))
    env = child_env(SETTINGS_VARS, {
        "HELIX_DBOS_APP": "missing_provider_app:runtime",
        "HELIX_DBOS_DATABASE_URL": refused_db,
        "PYTHONPATH": f"{tmp_path}:{ROOT}",
    })
    proc = subprocess.run([sys.executable, "-m", "helix_dbos.service", "--port", str(free_port())], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "error [configuration_error]: agent 'writer'" in proc.stderr and repr(package) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    _untouched(refused_db)
