"""What a tool's ``reconcile`` check answers when recovery asks whether an effect happened.

A check turns "the tool may have run" into a known answer by asking the outside system, keyed on
the dispatch id the body used. It must only read: it runs in recovery, possibly more than once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .context import CheckContext


@dataclass(frozen=True, slots=True)
class Applied:
    """The effect happened: the call is answered ``ok`` with ``result`` and no body runs again."""

    result: Any = None


@dataclass(frozen=True, slots=True)
class NotApplied:
    """The effect provably did not happen: the call runs again as a new attempt (within 3 bodies)."""


Verdict = Applied | NotApplied | None
#: ``check(ctx)``: sync or async; ``None`` means "cannot tell" (the call stays ``outcome_unknown``).
ReconcileCheck = Callable[[CheckContext], Verdict | Awaitable[Verdict]]
