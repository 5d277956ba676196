"""One registry per launch, one launched runtime per process (runtime/floor/registry.py).

Real runtimes on both stores: a second runtime launched while one is live is refused, typed, and the
first keeps its workflows; after ``shutdown`` the next one launches and DBOS runs *its* workflows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos import errors
from helix_dbos.errors import ConfigurationError, ExecutorIdInUseError, RuntimeAlreadyLaunchedError
from helix_dbos.runtime.process import dbos_private, executor_lock
from helix_dbos.runtime.floor import registry as state
from helix_dbos.runtime.process.executor_lock import ExecutorLock
from tests.support.waiting import wait_for


def _agent(text: str = "hi") -> hx.Agent:
    return hx.Agent("echo", TestModel(custom_output_text=text))


def _runtime(db_url: str, text: str = "hi") -> hx.Runtime:
    return hx.Runtime([_agent(text)], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")


def _registry_of(rt: hx.Runtime) -> state.Registry:
    """The registry ``rt``'s launch made and installed (its runner holds it)."""
    launched = rt._launched
    assert launched is not None and launched.runner is not None
    assert state.installed() is launched.runner.registry
    return launched.runner.registry


def test_the_error_is_typed_and_exported() -> None:
    assert "RuntimeAlreadyLaunchedError" in errors.__all__
    assert RuntimeAlreadyLaunchedError.code == "runtime_already_launched"
    assert issubclass(RuntimeAlreadyLaunchedError, ConfigurationError)


def test_a_second_runtime_in_one_process_is_refused_and_the_first_keeps_its_workflows(
    make_runtime: Callable[..., hx.Runtime], db_url: str
) -> None:
    first = make_runtime([_agent("first")])
    mine = _registry_of(first)
    run_workflow = mine.run_workflow
    second = _runtime(db_url, "second")
    try:
        with pytest.raises(RuntimeAlreadyLaunchedError) as caught:
            second.launch()
        assert caught.value.code == "runtime_already_launched"
        with pytest.raises(RuntimeAlreadyLaunchedError):
            first.launch()  # nor can the live one launch twice
    finally:
        second.shutdown()  # a refused runtime's shutdown leaves the live one alone
    assert _registry_of(first) is mine
    assert dbos_private.registered_workflow("helix.run") is run_workflow
    # the first keeps its executor id: its own registry holds the lock, and its lease row is live.
    # ``lock_held`` is False while a confirmation is overdue (the watchdog idles after a quiet spell
    # and is woken by the ask, as a body's ``wait_lock_held`` is): asked again until confirmed
    wait_for("the first runtime's executor lock confirmed", mine.lock_held, timeout=60)
    lease = {e["executor_id"]: e for e in first.reader.executors()}[first.executor_id]
    assert lease["status"] == "live" and lease["released_at"] is None
    result = first.start("echo", "go").result(timeout=120)
    assert result.status == "completed" and result.output == "first"


def test_after_shutdown_the_next_runtime_launches_and_dbos_runs_its_workflows(db_url: str) -> None:
    first = _runtime(db_url, "first").launch()
    try:
        old = _registry_of(first)
        assert first.start("echo", "go").result(timeout=120).output == "first"
    finally:
        first.shutdown()
    assert state.installed() is None
    with pytest.raises(ConfigurationError):
        first.engine  # noqa: B018 - a runtime shut down is not launched
    second = _runtime(db_url, "second").launch()
    try:
        new = _registry_of(second)
        assert new is not old and new.env.agents["echo"] is not old.env.agents["echo"]
        # DBOS resolves the name to the new launch's closures, and entries start those
        assert dbos_private.registered_workflow("helix.run") is new.run_workflow is not old.run_workflow
        assert dbos_private.registered_workflow("helix.companion") is new.companion_workflow
        assert second.start("echo", "go").result(timeout=120).output == "second"
    finally:
        second.shutdown()


def test_a_launch_that_fails_leaves_nothing_installed(db_url: str) -> None:
    """A runtime refused its executor id installs no registry: the process can launch another."""
    holder = ExecutorLock(db_url)
    taken = holder.acquire(f"held-{uuid.uuid4().hex[:8]}")
    try:
        refused = hx.Runtime([_agent()], database_url=db_url, executor_id=taken)
        with pytest.raises(ExecutorIdInUseError):
            refused.launch()
        assert state.installed() is None
        assert dbos_private.configured_dbos() is None
    finally:
        holder.release()
    rt = _runtime(db_url).launch()
    try:
        assert rt.start("echo", "go").result(timeout=120).status == "completed"
    finally:
        rt.shutdown()
