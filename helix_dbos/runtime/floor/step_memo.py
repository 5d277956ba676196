"""One read of a step's calls for all the gates a group commit runs together.

A step's parallel calls reach their gates in the same event-loop turn, and the group commit runs
those gates in one transaction (``group_commit``). Each gate read the whole step (its calls, the
fence beside them, the session row and the calls locked) to decide its own call among its
siblings: three identical reads for a step of three calls, each a round trip, a plan and an
executor start on the server. The first read is kept here for the rest of the transaction, and
each later gate reads the kept rows as its own read would have found them.

Why the kept rows are what a new read would return: the first read locks the session row and the
step's calls (``for_update``) until the transaction ends, and every other writer of a call takes
the session row first (the fence's order), so inside the transaction the calls change only by its
own writes. The one write a gate makes on the happy path, its attempt, is patched into the kept
row (``started``). Every other write of a call (a pairing, a stop's answer, a proof, a result)
drops what is kept (``forget``), and the next gate reads again. The fence's other conditions (a
stop record, DBOS's status of the workflow) are read once per transaction as before for a single
gate: a stop or a cancel that commits after the first read is ordered after this transaction,
which is what a single gate's read followed by its commit already allows (the result write is
fenced again).

Outside a group commit (``shared`` not entered) nothing is kept: a gate on its own reads as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Final, cast

import sqlalchemy as sa

from ...ledger.records import CallRow
from .fence import FenceHead

#: ``Connection.info``'s key for the rows kept inside ``shared``.
_KEY: Final = "helix_step_memo"
#: What a kept read is known by: run, saver, step, whether the calls were locked.
Key = tuple[str, str, int, bool]


@contextmanager
def shared(conn: sa.Connection) -> Iterator[None]:
    """Keep step reads for the block (one transaction: a group commit's). Nested: the outer block's."""
    if _KEY in conn.info:
        yield
        return
    info = conn.info  # the dict itself: a connection lost inside the block may not answer ``conn.info`` again
    info[_KEY] = {}
    try:
        yield
    finally:
        info.pop(_KEY, None)


def _memo(conn: sa.Connection) -> dict[Key, tuple[FenceHead, list[CallRow]]] | None:
    return cast("dict[Key, tuple[FenceHead, list[CallRow]]] | None", conn.info.get(_KEY))


def recall(conn: sa.Connection, key: Key) -> tuple[FenceHead, list[CallRow]] | None:
    """The kept read (copies: a gate may change what it was handed), or None."""
    memo = _memo(conn)
    kept = memo.get(key) if memo is not None else None
    if kept is None:
        return None
    head, calls = kept
    return cast(FenceHead, dict(head)), [cast(CallRow, dict(c)) for c in calls]


def keep(conn: sa.Connection, key: Key, head: FenceHead, calls: list[CallRow]) -> None:
    """Keep a read inside ``shared`` (copies); nothing outside it."""
    memo = _memo(conn)
    if memo is not None:
        memo[key] = (cast(FenceHead, dict(head)), [cast(CallRow, dict(c)) for c in calls])


def started(conn: sa.Connection, dispatch_id: str, attempt: int, started_at: datetime, *, transactional: bool) -> None:
    """Patch a kept call with the attempt its gate just wrote (``attempts.start_attempt``'s changes
    to the call's row): running, its attempt count, its first start; ``transactional`` cleared when
    a body runs outside a transaction."""
    memo = _memo(conn)
    if not memo:
        return
    for _head, calls in memo.values():
        for c in calls:
            if c["dispatch_id"] == dispatch_id:
                c["status"] = "running"
                c["attempts"] = attempt
                c["started_at"] = c["started_at"] or started_at
                if not transactional and c.get("transactional"):
                    c["transactional"] = False


def forget(conn: sa.Connection) -> None:
    """Drop what is kept: a write other than a gate's attempt changed (or may have changed) a call."""
    memo = _memo(conn)
    if memo:
        memo.clear()
