"""What an agent may use of the fleet: runs in flight at once, model requests per period.

Set per agent name on the runtime (``Runtime(limits={"support": AgentLimits(max_running=5)})``) and
enforced across every process on the database, not per process (docs/scaling.md): a run over
``max_running`` waits ``queued`` on its agent's DBOS queue; a model request over
``model_requests`` waits for the window, it never fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError


@dataclass(frozen=True)
class AgentLimits:
    """``max_running``: the agent's runs in flight at once, fleet-wide (DBOS's global concurrency of
    its queue). ``model_requests``: ``(n, period_s)``, at most ``n`` model requests of the agent's
    runs in any ``period_s`` seconds, fleet-wide (the ledger's sliding window)."""

    max_running: int | None = None
    model_requests: tuple[int, float] | None = None

    def __post_init__(self) -> None:
        # read as plain objects: a caller's value is checked, not trusted to match the annotation
        max_running: object = self.max_running
        if max_running is not None and not (type(max_running) is int and max_running >= 1):
            raise ConfigurationError(f"max_running must be an int >= 1, not {max_running!r}")
        requests: object = self.model_requests
        if requests is not None:
            ok = isinstance(requests, tuple) and len(requests) == 2
            n, period = requests if isinstance(requests, tuple) and ok else (0, 0.0)
            if not (ok and type(n) is int and n >= 1 and isinstance(period, (int, float)) and 0 < period <= 86400):
                raise ConfigurationError(f"model_requests must be (n >= 1, period in seconds, 0 < period <= 86400), not {self.model_requests!r}")
