"""JSON a user (or a library on the user's side) gives or reads, passed through as given.

These are the user's edges, not records between helix_dbos's own modules: what crosses between
those is a ``TypedDict`` (a row, or a value a workflow records as JSON) or a frozen dataclass
(``ledger/records.py``, ``runtime/floor/records.py``). Here the keys are someone else's, so no
narrower type would be true: a tool's arguments as the model wrote them, a tool's result or error
as the model reads it, pydantic-ai's messages in their JSON form, a YAML file's contents. Naming
each edge once keeps ``dict[str, Any]`` out of the runtime's own signatures
(``tests/unit/test_single_sources.py`` fails when a raw one appears in ``helix_dbos/runtime/``).
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: A JSON object whose keys a user or a library chose (pydantic-ai's message JSON, a call's error as
#: the model reads it, a parsed config file).
JsonObject: TypeAlias = dict[str, Any]

#: A tool's arguments as validated for its body (its input model dumped as JSON), or as the model
#: wrote them when they did not validate.
ToolArgs: TypeAlias = JsonObject

__all__ = ["JsonObject", "ToolArgs"]
