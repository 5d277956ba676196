"""The order rules as lanes: calls of one lane run one after another in reply order, lanes in parallel.

A call in a ``concurrency_group`` joins that group's lane; a ``sequential`` call joins the one
sequential chain; a call in both joins them into one lane (its order must hold in each). Everything
else gets a lane of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Ordered(Protocol):
    @property
    def position(self) -> int: ...
    @property
    def concurrency_group(self) -> str | None: ...
    @property
    def sequential(self) -> bool: ...


C = TypeVar("C", bound=Ordered)


def lanes(calls: Sequence[C]) -> list[list[C]]:
    """Partition ``calls`` into lanes; each lane is in position order, lanes in order of first call."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    def keys_of(call: C) -> list[str]:
        keys = []
        if call.concurrency_group:
            keys.append(f"group:{call.concurrency_group}")
        if call.sequential:
            keys.append("sequential")
        return keys or [f"solo:{call.position}"]

    ordered = sorted(calls, key=lambda c: c.position)
    for call in ordered:
        first, *rest = keys_of(call)
        for other in rest:
            parent[find(other)] = find(first)
    grouped: dict[str, list[C]] = {}
    for call in ordered:
        grouped.setdefault(find(keys_of(call)[0]), []).append(call)
    return list(grouped.values())
