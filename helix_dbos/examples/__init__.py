"""Public: example agents, served by the service and the CLI when ``HELIX_DBOS_APP`` names no other app.

They use scripted pydantic-ai ``FunctionModel``s, so everything runs offline and deterministically:
``concierge`` (an approval and a client-tool round trip) and ``errands`` (the crash demo's agent).
``HELIX_DBOS_APP=helix_dbos.examples:runtime`` is the default; an app of your own points at a
``hx.Runtime`` object or a factory returning one in the same way.
"""

from __future__ import annotations

import helix_dbos as hx

from .concierge import concierge_agent
from .errands import errands_agent


def build_runtime() -> hx.Runtime:
    """A fresh runtime over the example agents; its database comes from the usual resolution order."""
    return hx.Runtime([concierge_agent(), errands_agent()])


runtime = build_runtime()

__all__ = ["build_runtime", "concierge_agent", "errands_agent", "runtime"]
