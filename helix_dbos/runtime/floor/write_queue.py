"""What group commit keeps per run (``group_commit.py``): the writes waiting for their group, and each one's outcome.

Held by the launch's ``Registry`` (one queue per event loop, workflow and run), so two runtimes
never share a queue. A write is its transaction function already bound to its arguments
(``PendingWrite.work``), typed by what it returns; a group holds writes of different types, so
the group's list is ``PendingWrite[Any]`` and each write's own caller reads its outcome back as
the type it wrote (``group_commit.write``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

import sqlalchemy as sa

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Wrote(Generic[T]):
    """A write's transaction committed (alone or with its group) and returned ``value``."""

    value: T

    def unwrap(self) -> T:
        return self.value


@dataclass(frozen=True, slots=True)
class Raised:
    """A write raised ``error`` (alone, once its group rolled back), or its group could not commit."""

    error: BaseException

    def unwrap(self) -> NoReturn:
        raise self.error


@dataclass(eq=False, slots=True)
class PendingWrite(Generic[T]):
    """A ledger write waiting for its group.

    ``future`` wakes the write's task (its result is None): with ``outcome`` set, its group is done;
    without, its turn has come to run the next group. A stopping process sets an exception on it.
    """

    work: Callable[[sa.Connection], T]
    future: asyncio.Future[None]
    outcome: Wrote[T] | Raised | None = None


@dataclass(slots=True)
class GroupQueue:
    """One run's group-commit queue on one event loop."""

    waiting: list[PendingWrite[Any]] = field(default_factory=list)
    busy: bool = False


#: A group-commit queue's key: (event loop, workflow, run).
GroupKey = tuple[int, str | None, str]
