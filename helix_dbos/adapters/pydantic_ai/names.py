"""The name of a pydantic-ai agent given without ``name=``, inferred as pydantic-ai infers it.

Runs resolve agents by name in every process, so a name must come out the same wherever the agent
is read. pydantic-ai names an unnamed agent, on its first run, after the variable that binds it
(``Agent._infer_name``: the caller's locals, then its globals). Here the "first run" is the agent
being read by ``hx.Runtime``/``from_pydantic_ai``, and the variable is looked for first at module
level, in every loaded module: that binding is made alike by every process that imports the module
(``support_agent = Agent(...)`` in ``bank_support``), where a caller's locals are not (a loop
variable ``agent`` would name whichever agent the loop saw last). Only an agent bound at no module
level is named as pydantic-ai would name it, after the reading caller's variable (or, when the\ncaller is a helper that does not bind it, the nearest caller above that does). An agent bound to
several names, or to none, is refused: no name of it is the same in every process.
"""

from __future__ import annotations

import inspect
import sys
from types import FrameType
from typing import Any

from ...errors import ConfigurationError

_OWN_PACKAGE = __name__.split(".")[0]


def _caller_frame() -> FrameType | None:
    frame = inspect.currentframe()
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module != _OWN_PACKAGE and not module.startswith(_OWN_PACKAGE + "."):
            return frame
        frame = frame.f_back
    return None


def _bound_in(namespace: dict[str, Any], agent: Any) -> str | None:
    return next((name for name, item in list(namespace.items()) if item is agent), None)


def _module_names(agent: Any) -> list[str]:
    return sorted(
        {
            name
            for module in list(sys.modules.values())
            if (name := _bound_in(getattr(module, "__dict__", None) or {}, agent)) is not None
        }
    )


def _caller_name(agent: Any) -> str | None:
    """pydantic-ai's lookup (locals, then globals) in the first frame outside helix_dbos, then in the
    frames above it: a helper that builds the runtime (a fixture) does not bind the agent itself."""
    frame = _caller_frame()
    try:
        while frame is not None:
            found = _bound_in(frame.f_locals, agent)
            if found is None and frame.f_locals is not frame.f_globals:
                found = _bound_in(frame.f_globals, agent)
            if found is not None:
                return found
            frame = frame.f_back
        return None
    finally:
        del frame


def infer_agent_name(agent: Any) -> str:
    """``agent.name``, else the one module-level variable bound to it, else the caller's variable."""
    if agent.name:
        return str(agent.name)
    names = _module_names(agent)
    if len(names) == 1:
        return names[0]
    if not names and (found := _caller_name(agent)) is not None:
        return found
    where = f"it is bound at module level to several names ({', '.join(names)})" if names else "it is not bound to a variable"
    raise ConfigurationError(
        f"a pydantic-ai agent without name=: {where}, so no name is stable across processes (runs resolve "
        "agents by name in whichever process recovers them); give Agent(..., name='...')"
    )
