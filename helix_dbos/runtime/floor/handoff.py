"""What a workflow's transaction read for this process, handed over in memory, never recorded.

Two reads ride on a workflow's own transactions instead of costing one of their own: the entry's
prepare reads the first model request's transcript and fence (``model_request.preread``), and the transaction
that brings a run to rest reads its result for the caller waiting in this process (``RunHandle``).
Each is taken once, by key, and only when the transaction committed fresh in this execution
(``durable.tx_and_read``): a replay, a concurrent execution's record or a process that never took
it leaves the taker to read the ledger itself, so a handoff can only save a read, never change
what is read. A put also wakes a wait for that run (``sleeper``), whoever takes it. Bounded: the
oldest entries drop out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Handoff(Generic[K, V]):
    """Values by key, each taken once; a waiter for a key can sleep until it is put (``sleeper``)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._puts = 0
        self._cond = threading.Condition()

    def put(self, key: K, value: V) -> None:
        with self._cond:
            self._puts += 1
            self._items[key] = (value, self._puts)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            self._cond.notify_all()

    def take(self, key: K) -> V | None:
        with self._cond:
            item = self._items.pop(key, None)
        return None if item is None else item[0]

    def _seq(self, key: K) -> int:
        item = self._items.get(key)
        return 0 if item is None else item[1]

    def sleeper(self, key: K) -> Callable[[float], None]:
        """A sleep of at most its timeout that ends as soon as ``key`` is put anew (after this sleeper
        was made, or after its previous sleep ended): a wait for a run this process is executing
        wakes when its last transaction commits, rather than on its next poll."""
        with self._cond:
            seen = [self._seq(key)]

        def sleep(timeout: float) -> None:
            with self._cond:
                self._cond.wait_for(lambda: self._seq(key) not in (0, seen[0]), timeout)
                seen[0] = self._seq(key) or seen[0]

        return sleep

    def __len__(self) -> int:
        return len(self._items)
