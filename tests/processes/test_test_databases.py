"""The test suite cleans up the databases it creates on the Postgres server.

Each test session (each pytest-xdist worker) migrates a template of its own,
``helix_tpl_<migrations hash>_<session>``, clones one ``helix_t_<id>`` database per Postgres test
from it and drops that after the test, and drops the template at its end. A session killed before
its end leaves its template, which the next session sweeps (its owner's advisory lock is free); a
live session's template is never touched. Checked with a real child pytest session.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from tests import conftest
from tests.support.procs import ROOT, child_env


def _databases() -> set[str]:
    with conftest._admin_engine().connect() as conn:
        return set(conn.execute(sa.text("SELECT datname FROM pg_database WHERE datname LIKE 'helix%'")).scalars())


def test_a_postgres_test_gets_a_fresh_clone_of_the_template(pg_url: str) -> None:
    """What the child session below runs: a clone with DBOS's and the ledger's schemas, nothing else."""
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            schemas = set(conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname IN ('dbos', 'helix')")).scalars())
            assert schemas == {"dbos", "helix"}
            assert conn.execute(sa.text("SELECT count(*) FROM helix.sessions")).scalar() == 0
    finally:
        engine.dispose()
    assert re.fullmatch(r"helix_t_[0-9a-f]{12}", pg_url.rsplit("/", 1)[1])


@pytest.mark.kills
def test_a_session_drops_its_template_and_sweeps_a_dead_sessions(pg_url: str) -> None:
    mine = conftest.TEMPLATE  # this session's template exists (pg_url made it) and must survive the child
    orphan = f"{conftest.TEMPLATE.rsplit('_', 1)[0]}_{uuid.uuid4().hex[:8]}"  # as a killed session leaves it
    with conftest._admin_engine().connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {orphan}"))
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-o", "addopts=",
         "tests/processes/test_test_databases.py::test_a_postgres_test_gets_a_fresh_clone_of_the_template"],
        cwd=ROOT, env=child_env(("HELIX_DBOS_CRASH_AT", "HELIX_DBOS_FAIL_AT", "DBOS__", "PYTEST_")), capture_output=True, text=True, timeout=300, check=False,
    )
    assert child.returncode == 0 and "1 passed" in child.stdout, child.stdout[-3000:] + child.stderr[-3000:]
    found = re.search(r"cloned from template (helix_tpl_\w+)", child.stdout)
    assert found is not None, child.stdout[-2000:]
    theirs = found.group(1)
    left = _databases()
    assert theirs != mine and theirs not in left  # the child dropped its own template at its end
    assert orphan not in left  # and swept the dead session's
    assert mine in left  # but not a live session's
