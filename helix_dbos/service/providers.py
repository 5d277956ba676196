"""Every agent's model is built before the service takes a request, so a missing provider refuses
the start instead of failing each session later.

A model named by a string (``"anthropic:claude-sonnet-4-0"``) is resolved by pydantic-ai on its
first use; without its provider's package that was the first session's ``run_error`` (an
ImportError), every session after it failing the same way, while the service answered ``/healthz``
as healthy. Resolving each agent's model here (the one the runs then use) turns that into one typed
``ConfigurationError`` at start that names the agent, the model and the package to install.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

_INSTALL = re.compile(r'pip install "([^"]+)"')


def _missing_package(exc: ImportError) -> str | None:
    """The module that could not be imported: pydantic-ai re-raises the import's own error as the cause."""
    cause = exc.__cause__
    return exc.name or (cause.name if isinstance(cause, ImportError) else None)


def check_models(agents: Mapping[str, Any]) -> None:
    """Resolve each agent's model now; a provider that cannot be loaded refuses the start, typed."""
    for name in sorted(agents):
        agent = agents[name]
        model = agent.model if isinstance(agent.model, str) else type(agent.model).__name__
        try:
            agent.check_model()
        except ImportError as exc:
            package = _missing_package(exc)
            install = _INSTALL.search(str(exc))
            raise ConfigurationError(
                f"agent {name!r}: model {model!r} needs the provider package {package or '?'!r}, which is not installed"
                + (f"; install it with: pip install \"{install.group(1)}\"" if install else ""),
                detail={"agent": name, "model": model, "package": package, "error": str(exc)},
            ) from None
        except Exception as exc:  # noqa: BLE001  (an unknown model, a missing API key: pydantic-ai raises several types)
            raise ConfigurationError(
                f"agent {name!r}: cannot use model {model!r}: {exc}", detail={"agent": name, "model": model, "error": f"{type(exc).__name__}: {exc}"}
            ) from None
