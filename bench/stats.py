"""Counting what a limit allowed, from timestamps read back out of the ledger: shared by the bench's
``scale`` section and the tests that assert the same limits (one rule, so a bench figure and a test
verdict never disagree about what "exceeded" means).

An interval is ``(start, end)`` in seconds; an end at ``t`` closes before a start at ``t`` opens (a
run that ends as the next one starts never overlaps it). A grant's window is half-open.
"""

from __future__ import annotations


def _edges(spans: list[tuple[float, float]]) -> list[tuple[float, int]]:
    """Every start (+1) and end (-1), ends first at one instant."""
    return sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    best = cur = 0
    for _, d in _edges(spans):
        cur += d
        best = max(best, cur)
    return best


def starts_over(spans: list[tuple[float, float]], cap: int) -> int:
    """How many starts found ``cap`` or more intervals already open (each one a time the cap was exceeded)."""
    cur = over = 0
    for _, d in _edges(spans):
        if d == 1 and cur >= cap:
            over += 1
        cur += d
    return over


def max_in_window(epochs: list[float], period: float) -> int:
    """The most grants any half-open window of ``period`` seconds holds (each grant opens one)."""
    epochs = sorted(epochs)
    best, lo = 0, 0
    for hi, e in enumerate(epochs):
        while epochs[lo] <= e - period:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
