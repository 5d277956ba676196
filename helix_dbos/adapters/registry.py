"""The registered adapters, and ``adapt``: each object ``hx.Runtime(agents=[...])`` is handed, read
into a definition by the first adapter that accepts it.

Registering an adapter is one line (``register(ADAPTER)``): the runtime holds no list of SDKs and no
``isinstance`` chain, so a new SDK needs no runtime edit. The built-in adapters are registered by
``helix_dbos/adapters/__init__.py``; an application's own adapter by its own ``register`` call before
it builds the runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..definitions.agents import Agent
from ..errors import ConfigurationError
from .base import FrameworkAdapter

_ADAPTERS: dict[str, FrameworkAdapter] = {}


def register(adapter: FrameworkAdapter) -> FrameworkAdapter:
    """Make ``adapter`` one ``adapt`` tries (after those registered before it); returned, so a module
    can bind and register in one line. Registering another adapter under a taken name is refused:
    two SDKs answering to one name would make messages and ``unregister`` ambiguous."""
    if not isinstance(adapter, FrameworkAdapter):
        raise ConfigurationError(f"an adapter needs name, accepts, name_of and build (helix_dbos.adapters.base.FrameworkAdapter), not {adapter!r:.80}")
    other = _ADAPTERS.get(adapter.name)
    if other is not None and other is not adapter:
        raise ConfigurationError(f"an adapter named {adapter.name!r} is already registered ({other!r:.80})")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def unregister(name: str) -> None:
    """Forget the adapter registered as ``name`` (an application's or a test's own)."""
    _ADAPTERS.pop(name, None)


def registered() -> tuple[FrameworkAdapter, ...]:
    """The adapters ``adapt`` tries, in order."""
    return tuple(_ADAPTERS.values())


def adapt_one(obj: object, tool_policies: Mapping[str, Any] | None, deps_factories: Mapping[str, Any] | None) -> Agent:
    """``obj`` as a definition: an ``hx.Agent`` as it is, an SDK's agent through its adapter;
    anything else is refused naming the SDKs that are registered."""
    if isinstance(obj, Agent):
        return obj
    for adapter in _ADAPTERS.values():
        if adapter.accepts(obj):
            name = adapter.name_of(obj)
            agent = adapter.build(obj, name=name, tool_policies=(tool_policies or {}).get(name), deps_factory=(deps_factories or {}).get(name))
            if not isinstance(agent, Agent):
                raise ConfigurationError(f"adapter {adapter.name!r} built {agent!r:.80} from agent {name!r}, not an hx.Agent")
            return agent
    kinds = ", ".join(["hx.Agent", *(f"an agent of {a.name}" for a in _ADAPTERS.values())])
    raise ConfigurationError(f"agents must be one of: {kinds}; not {type(obj).__name__}", detail={"type": type(obj).__name__, "adapters": list(_ADAPTERS)})


def adapt(agents: Iterable[object], tool_policies: Mapping[str, Any] | None, deps_factories: Mapping[str, Any] | None) -> list[Agent]:
    """Every object handed to ``hx.Runtime(agents=...)`` as a definition (see ``adapt_one``)."""
    return [adapt_one(obj, tool_policies, deps_factories) for obj in agents]
