"""One retry budget per model request step, counted in requests as the provider sees them.

The provider SDK's own retries are turned off for the runtime's requests (pydantic-ai's
``ModelSettings['max_retries'] = 0``), so ``attempts`` is the number of HTTP requests a step can
make, and every wait between them is the runtime's: at least what the provider asked for
(``Retry-After`` / ``retry-after-ms``), with jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import ConfigurationError


@dataclass(frozen=True)
class ModelRetries:
    """How a model request step retries a provider error worth retrying (rate limit, overload, 5xx,
    connection, timeout).

    ``attempts``: requests per step at most, the first included (the provider sees no more: its SDK's
    own retries are off). Before retry ``n`` (1, 2, ...) the step waits ``first_delay * backoff**(n-1)``
    capped at ``max_delay``, or longer when the provider asked for longer; then stretched at random by
    up to ``jitter`` (a fraction), so runs that failed together do not come back together. A provider
    asking for more than ``max_retry_after`` seconds is not waited for: the step fails now, typed
    (``model_rate_limited`` / ``model_unavailable``), and ``retry()`` continues the run later.
    """

    attempts: int = 4
    first_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.2
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ConfigurationError(f"ModelRetries.attempts must be an int >= 1, not {self.attempts!r}")
        for name in ("first_delay", "max_delay", "max_retry_after", "jitter"):
            value: object = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"ModelRetries.{name} must be a number >= 0, not {value!r}")
        backoff: object = self.backoff  # a caller's value is checked, not trusted to match the annotation
        if not isinstance(backoff, (int, float)) or backoff < 1:
            raise ConfigurationError(f"ModelRetries.backoff must be a number >= 1, not {self.backoff!r}")

    def wait(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry ``retry`` (1 for the second request), or ``None``: do not
        retry (the provider asked for longer than ``max_retry_after``)."""
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        base = min(self.first_delay * self.backoff ** (retry - 1), self.max_delay)
        floor = max(base, retry_after or 0.0)
        return floor * (1.0 + random.uniform(0.0, self.jitter))
