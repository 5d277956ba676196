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


def lane_keys(concurrency_group: str | None, sequential: bool) -> tuple[str, ...]:
    """The order rules a call is under, one key each: its group's lane and/or the sequential chain.

    The single definition of "ordered with": ``lanes`` runs calls sharing a key one after another,
    and ``decide`` doubts (or holds back) a call sharing a key with an earlier call in doubt (or
    waiting). Were they two spellings, a call could be doubted by a call it never ran after.
    Empty for a call under no order rule.
    """
    keys: tuple[str, ...] = (f"group:{concurrency_group}",) if concurrency_group else ()
    return (*keys, "sequential") if sequential else keys


def lanes(calls: Sequence[C]) -> list[list[C]]:
    """Partition ``calls`` into lanes; each lane is in position order, lanes in order of first call."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    def keys_of(call: C) -> tuple[str, ...]:
        return lane_keys(call.concurrency_group, call.sequential) or (f"solo:{call.position}",)

    ordered = sorted(calls, key=lambda c: c.position)
    for call in ordered:
        first, *rest = keys_of(call)
        for other in rest:
            parent[find(other)] = find(first)
    grouped: dict[str, list[C]] = {}
    for call in ordered:
        grouped.setdefault(find(keys_of(call)[0]), []).append(call)
    return list(grouped.values())
