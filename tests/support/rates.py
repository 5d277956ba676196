"""Reading a rate limit's grants back: the most that any window of the period held."""

from __future__ import annotations


def max_in_window(epochs: list[float], period: float) -> int:
    """The most grants any half-open window of ``period`` seconds holds (each grant opens one)."""
    epochs = sorted(epochs)
    best, lo = 0, 0
    for hi, e in enumerate(epochs):
        while epochs[lo] <= e - period:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
