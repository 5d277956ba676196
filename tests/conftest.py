"""Fixtures: every database test runs on SQLite and on Postgres, each test on a fresh database.

Postgres is ``HELIX_DBOS_TEST_PG_URL`` (default: the local server, user postgres). When it cannot be
reached the Postgres half skips with a clear message, except in CI (``CI=true``) or with
``HELIX_DBOS_REQUIRE_POSTGRES=1``, where it fails: CI must never pass on SQLite alone.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import helix_dbos as hx

def _restore_ctrl_c() -> None:
    """Children the tests signal must react to Ctrl-C as a terminal's process does, however the
    suite was launched: a shell's background job (``cmd &`` without job control, ``nohup``) starts
    with SIGINT ignored, and an ignored signal is inherited through exec, so every app a test spawns
    would ignore the SIGINT it is sent (Python installs its KeyboardInterrupt handler only when
    SIGINT is not ignored at start). A handled signal is reset to its default at exec instead."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_restore_ctrl_c()


@pytest.fixture(autouse=True)
def _dbos_console_on_a_live_stream() -> None:
    """DBOS makes its console log handler once per process, on whatever ``sys.stderr`` is then; when
    that was a CliRunner's or capsys's stream, it is closed by the next test, and every later
    ``DBOS(...)`` in this worker fails flushing it ("I/O operation on closed file"), depending on
    which test ran first. Point such a handler back at the process's real stderr."""
    for handler in logging.getLogger("dbos").handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
            handler.stream = sys.__stderr__  # not setStream: it flushes the closed stream first

#: Every pool the suite opens is capped (docs/operations.md, "Database connections"): a runtime of a
#: test, and every worker or app a test starts (they inherit the environment), holds at most
#: 2 + 3 + 3 connections plus DBOS's listener and its lock, so `pytest -n 4` fits a Postgres server
#: with `max_connections = 100` that others use too. A test that needs a size says so itself.
SUITE_POOLS = {"HELIX_DBOS_API_POOL": "2", "HELIX_DBOS_TX_POOL": "3", "HELIX_DBOS_DBOS_POOL": "3"}
for _name, _size in SUITE_POOLS.items():
    os.environ.setdefault(_name, _size)

PG_URL = os.environ.get("HELIX_DBOS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("HELIX_DBOS_REQUIRE_POSTGRES") == "1"


def _template_name() -> str:
    """Named after the migrations it holds, and this test session (an xdist worker is a session).

    A template of its own is dropped at the session's end without asking who else uses it; the
    migrations' hash in the name keeps a glance at the server telling which code made it.
    """
    import hashlib

    import dbos

    root = Path(__file__).resolve().parent.parent / "migrations" / "versions"
    h = hashlib.sha1(dbos.__version__.encode() if hasattr(dbos, "__version__") else b"dbos")
    for f in sorted(root.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return f"helix_tpl_{h.hexdigest()[:12]}_{uuid.uuid4().hex[:8]}"


TEMPLATE = _template_name()
#: Advisory locks on the server: TEMPLATE_LOCK serialises creating and sweeping templates across
#: sessions; (TEMPLATE_OWNER, hashtext(name)) is held by the session that owns a template, on a
#: connection open until it ends, so a template whose lock is free was left by a killed session.
TEMPLATE_LOCK = 4242
TEMPLATE_OWNER = 4243

_pg_state: dict[str, object] = {}


def _admin_engine() -> sa.Engine:
    url = make_url(PG_URL).set(drivername="postgresql+psycopg")
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3})


def _pg_available() -> str | None:
    """None when Postgres is reachable, else why not."""
    if "error" not in _pg_state:
        try:
            with _admin_engine().connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            _pg_state["error"] = None
        except Exception as exc:  # any failure to connect means: no server for this run
            _pg_state["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return _pg_state["error"]  # type: ignore[return-value]


def _db_url(name: str) -> str:
    return make_url(PG_URL).set(database=name, drivername="postgresql").render_as_string(hide_password=False)


def _sweep_orphans(conn: sa.Connection) -> list[str]:
    """Drop the templates of sessions that died before their end (their owner's lock is free).

    Only per-session names (``helix_tpl_<hash>_<session>``) are swept; a bare ``helix_tpl_<hash>``
    belongs to an older conftest that shares it and is left alone.
    """
    swept = []
    names = conn.execute(sa.text("SELECT datname FROM pg_database WHERE datname ~ '^helix_tpl_[0-9a-f]{12}_[0-9a-f]{8}$'")).scalars().all()
    for name in names:
        if conn.execute(sa.text(f"SELECT pg_try_advisory_lock({TEMPLATE_OWNER}, hashtext(:d))"), {"d": name}).scalar():
            try:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                swept.append(name)
            finally:
                conn.execute(sa.text(f"SELECT pg_advisory_unlock({TEMPLATE_OWNER}, hashtext(:d))"), {"d": name})
    return swept


def _ensure_template() -> None:
    """A database migrated once per session (DBOS + ledger) that its test databases are cloned from."""
    if _pg_state.get("template"):
        return
    from dbos import DBOS

    from helix_dbos.ledger.migrate import upgrade

    admin = _admin_engine()
    with admin.connect() as lock_conn:
        lock_conn.execute(sa.text(f"SELECT pg_advisory_lock({TEMPLATE_LOCK})"))  # one creator or sweeper at a time
        try:
            _sweep_orphans(lock_conn)
            owner = _admin_engine().connect()  # held open until the session ends: "this template is in use"
            owner.execute(sa.text(f"SELECT pg_advisory_lock({TEMPLATE_OWNER}, hashtext(:d))"), {"d": TEMPLATE})
            _pg_state["owner"] = owner
            lock_conn.execute(sa.text(f"CREATE DATABASE {TEMPLATE}"))
            url = _db_url(TEMPLATE)
            DBOS.migrate(url)
            upgrade(url)
            lock_conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"),
                {"d": TEMPLATE},
            )
        finally:
            lock_conn.execute(sa.text(f"SELECT pg_advisory_unlock({TEMPLATE_LOCK})"))
    _pg_state["template"] = True


def drop_template() -> bool:
    """Drop this session's template (True if it had one), then release its owner's lock."""
    owner = _pg_state.pop("owner", None)
    _pg_state.pop("template", None)
    if owner is None:
        return False
    try:
        with _admin_engine().connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)"))
    finally:
        owner.close()  # frees the lock: were the drop to fail, the next session sweeps it
    return True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves no template behind (each xdist worker drops its own; the controller has none)."""
    template = _sqlite_state.pop("template", None)
    if template is not None:
        import shutil

        shutil.rmtree(template.parent, ignore_errors=True)
    import warnings

    try:
        _settle_postgres_databases()
    except Exception as exc:  # noqa: BLE001  (a server gone at the end must not fail a finished suite)
        warnings.warn(f"could not drop every test database: {exc}", stacklevel=1)
    try:
        drop_template()
    except Exception as exc:  # noqa: BLE001  (as above)
        warnings.warn(f"could not drop the test template {TEMPLATE}: {exc}", stacklevel=1)


def _clone() -> str:
    """A new ``helix_t_<id>`` database cloned from this session's template."""
    import time

    _ensure_template()
    name = f"helix_t_{uuid.uuid4().hex[:12]}"
    for attempt in range(50):
        try:
            with _admin_engine().connect() as conn:
                conn.execute(sa.text(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
            break
        except sa.exc.OperationalError as exc:  # another session is cloning the template right now
            if "being accessed by other users" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.1)
    return _db_url(name)


def _drop(url: str) -> None:
    name = make_url(url).database
    with _admin_engine().connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


#: Postgres test databases are cloned one test ahead and dropped behind, off the tests' clock: a
#: DROP DATABASE waits for a checkpoint of the whole server (1 to 5 s while other tests write), a
#: clone copies the template (about 0.6 s), and half the suite's tests take a Postgres database.
#: Drops run a few at a time, so one checkpoint serves several; the session's end waits for them.
_pg_pipeline: dict[str, object] = {}


def _executor(kind: str, workers: int) -> concurrent.futures.ThreadPoolExecutor:
    pool = _pg_pipeline.get(kind)
    if pool is None:
        pool = _pg_pipeline[kind] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=f"helix-test-db-{kind}")
    return pool  # type: ignore[return-value]


def fresh_postgres_url() -> str:
    """A fresh database: the one cloned ahead if there is one, and the next clone started."""
    _ensure_template()  # in this thread: a failure to make the template fails the test that asked
    ahead: concurrent.futures.Future[str] | None = _pg_pipeline.pop("ahead", None)  # type: ignore[assignment]
    url = ahead.result() if ahead is not None else _clone()
    _pg_pipeline["ahead"] = _executor("clone", 1).submit(_clone)
    return url


def drop_postgres(url: str) -> None:
    """Drop the test's database behind it (``_settle_postgres_databases`` waits for every drop)."""
    drops: list[concurrent.futures.Future[None]] = _pg_pipeline.setdefault("drops", [])  # type: ignore[assignment]
    drops[:] = [f for f in drops if not f.done() or f.exception() is not None]
    drops.append(_executor("drop", 3).submit(_drop, url))


def _settle_postgres_databases() -> None:
    """Drop the clone made ahead for no test and wait for every drop; a failed drop is reported."""
    ahead: concurrent.futures.Future[str] | None = _pg_pipeline.pop("ahead", None)  # type: ignore[assignment]
    if ahead is not None:
        drop_postgres(ahead.result())
    drops: list[concurrent.futures.Future[None]] = _pg_pipeline.pop("drops", [])  # type: ignore[assignment]
    errors = [f.exception() for f in drops if f.exception() is not None]  # .exception() waits for it
    for kind in ("clone", "drop"):
        pool = _pg_pipeline.pop(kind, None)
        if pool is not None:
            pool.shutdown(wait=True)  # type: ignore[attr-defined]
    if errors:
        raise RuntimeError(f"{len(errors)} test database(s) could not be dropped: {errors[0]!r}")


_sqlite_state: dict[str, Path] = {}


def sqlite_copy_of_template(path: Path) -> str:
    """A SQLite ledger at ``path``, copied from one migrated once per session (DBOS's tables and the
    ledger's), as Postgres test databases are cloned from a template: migrating a new file costs a
    launch about two seconds, paid by hundreds of tests. Tests of a first launch on a new file make
    their own URL (test_operational's concurrent first launches, test_cli's unmigrated reads)."""
    import sqlite3
    import tempfile

    template = _sqlite_state.get("template")
    if template is None:
        from dbos import DBOS

        from helix_dbos.ledger.migrate import upgrade

        template = Path(tempfile.mkdtemp(prefix="helix_sqlite_tpl_")) / "template.sqlite"
        url = f"sqlite:///{template}"
        DBOS.migrate(url)
        upgrade(url)
        _sqlite_state["template"] = template
    src, dst = sqlite3.connect(template), sqlite3.connect(path)
    try:
        src.backup(dst)  # one consistent file, whatever the template's WAL held
    finally:
        src.close()
        dst.close()
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: a SQLite file, or a Postgres database cloned from a migrated template."""
    if request.param == "sqlite":
        yield sqlite_copy_of_template(tmp_path / "helix.sqlite")
        return
    yield from _postgres_database()


#: A test whose rule does not depend on the database runs on SQLite only: HTTP, CLI or Python-API
#: validation that refuses before anything is read or stored, what is sent to a model, rendering.
#: Each use says why beside it; a rule the ledger, its locks, transactions or recovery carry runs on both.
one_database = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh Postgres database, for the few tests that only Postgres can run."""
    yield from _postgres_database()


def _postgres_database() -> Iterator[str]:
    error = _pg_available()
    if error is not None:
        message = f"PostgreSQL is not reachable at {PG_URL} ({error}); set HELIX_DBOS_TEST_PG_URL"
        if REQUIRE_PG:
            pytest.fail(f"{message}. Postgres is required in CI.")
        pytest.skip(f"{message}. Postgres tests skipped outside CI.")
    url = fresh_postgres_url()
    try:
        yield url
    finally:
        drop_postgres(url)


@pytest.fixture
def make_runtime(db_url: str) -> Iterator[Callable[..., hx.Runtime]]:
    """Build and launch one runtime per test (DBOS is one per process); shut down afterwards."""
    launched: list[hx.Runtime] = []

    def make(agents: list[hx.Agent], **kwargs: object) -> hx.Runtime:
        kwargs.setdefault("executor_id", f"test-{uuid.uuid4().hex[:8]}")
        rt = hx.Runtime(agents, database_url=db_url, **kwargs)  # type: ignore[arg-type]
        rt.launch()
        launched.append(rt)
        return rt

    yield make
    for rt in launched:
        rt.shutdown()


@pytest.fixture
def fam(db_url: str, tmp_path: Path) -> Iterator[object]:
    """The sub-agent / HITL family of agents (tests/scenarios/family.py) on a fresh database."""
    from tests.support.familykit import Family
    from tests.scenarios import family

    kit = Family(db_url, tmp_path)
    family.EFFECTS = kit.effects  # tools and models of an in-process runtime write here too
    yield kit
    kit.close()


def pytest_report_header(config: pytest.Config) -> str:
    error = _pg_available()
    where = f"PostgreSQL at {PG_URL}: " + ("reachable" if error is None else f"NOT reachable ({error})")
    return where + ("; required (CI)" if REQUIRE_PG else "") + f"; test databases helix_t_* cloned from template {TEMPLATE}"


def _sendable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes (everything else unchanged)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Tests store lone surrogates on purpose (what a tool produces is kept whatever its bytes), and
    the runtime logs such values; pytest-xdist sends each report's captured output to the controller
    as UTF-8, which cannot carry a lone surrogate and crashes the worker. Reports carry them escaped."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _sendable(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _sendable(text) != text:
            report.longrepr = _sendable(text)


#: The agent SDKs the recovery-contract suites run the scenario app's agent in (``tests/scenarios/app.py``,
#: ``SCENARIO_SDK``): an ``hx.Agent`` over a pydantic-ai model, and an OpenAI Agents SDK ``agents.Agent``.
SCENARIO_SDKS = ("pydantic_ai", "openai_agents")


@pytest.fixture(params=SCENARIO_SDKS)
def scenario_sdk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """One SDK per test; every process the test starts inherits it (``SCENARIO_SDK``)."""
    monkeypatch.setenv("SCENARIO_SDK", str(request.param))
    return str(request.param)
