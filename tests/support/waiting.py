"""Waiting for a condition, the one way the tests wait: poll it under a generous ceiling, so a busy
machine only makes a test slower, never wrong, and a fixed sleep never stands in for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float = 120.0,
    *,
    interval: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    """``check()``'s first true value, polled every ``interval`` seconds; an ``AssertionError`` naming
    ``what`` (and the last tolerated error) past ``timeout``. ``tolerate``: errors that mean "not
    yet" (a page mid-reload), polled through instead of failing the test."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except tolerate as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)
