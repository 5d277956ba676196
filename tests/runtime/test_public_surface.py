"""The public surface: every error a user can catch is exported from ``helix_dbos`` (and listed in
``__all__``), and a launched ``Runtime``'s configuration cannot be changed behind its back."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos import errors
from helix_dbos.runtime.face.runtime import CONFIGURATION


def _helix_errors() -> set[str]:
    return {name for name, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, hx.HelixError)}


def test_every_error_is_exported_from_the_package() -> None:
    names = _helix_errors()
    assert {"RunFailedError", "StoreUnavailableError", "UsageLimitExceededError"} <= names  # the scan saw them
    assert sorted(n for n in names if getattr(hx, n, None) is not getattr(errors, n)) == []
    assert sorted(names - set(hx.__all__)) == []
    assert sorted(names - set(errors.__all__)) == []


def test_a_launched_runtimes_configuration_is_read_only(make_runtime: Callable[..., hx.Runtime], db_url: str) -> None:
    before = hx.Runtime([hx.Agent("a", TestModel())], database_url="sqlite:///unused.sqlite")
    before.database_url = db_url  # before launch an operator tool may repoint it (loader.py's --db)
    assert before.database_url == db_url

    rt = make_runtime([hx.Agent("a", TestModel())])
    assert {"database_url", "live_output", "agents", "queue_name"} <= CONFIGURATION
    for name in sorted(CONFIGURATION):
        value: Any = getattr(rt, name)
        with pytest.raises(hx.ConfigurationError, match=f"Runtime.{name} is fixed"):
            setattr(rt, name, value)
        assert getattr(rt, name) is value


def test_a_configuration_change_before_launch_is_checked_like_an_argument() -> None:
    """Before launch an attribute may still be set (an operator tool's ``--db``, ``helix-dbos
    worker``'s mode); a bad value is refused, typed, as the same argument would be, and nothing changed."""
    rt = hx.Runtime([hx.Agent("a", TestModel())], database_url="sqlite:///unused.sqlite")
    with pytest.raises(hx.ConfigurationError, match="mode must be one of"):
        rt.mode = "bogus"  # type: ignore[assignment]
    with pytest.raises(hx.ConfigurationError, match="limits name an agent"):
        rt.limits = {"nobody": hx.AgentLimits(max_running=1)}
    assert rt.mode is None and rt.limits == {}
    rt.mode = "worker"
    assert rt.mode == "worker"


def test_serve_hands_the_front_end_mode_to_the_app_as_an_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """``helix-dbos serve --front-end`` makes the app's runtime a front end through ``create_app``'s
    argument, not by writing ``HELIX_DBOS_MODE``: a runtime that names no mode becomes a front end,
    one that names its own keeps it (as the variable never overrode an argument)."""
    from helix_dbos.service.app import create_app
    from helix_dbos.service.settings import ServiceSettings

    monkeypatch.delenv("HELIX_DBOS_MODE", raising=False)
    unnamed = hx.Runtime([hx.Agent("a", TestModel())], database_url="sqlite:///unused.sqlite")
    create_app(unnamed, settings=ServiceSettings(), front_end=True)
    named = hx.Runtime([hx.Agent("a", TestModel())], database_url="sqlite:///unused.sqlite", mode="process")
    create_app(named, settings=ServiceSettings(), front_end=True)
    assert (unnamed.mode, named.mode) == ("client", "process")
    assert "HELIX_DBOS_MODE" not in os.environ
