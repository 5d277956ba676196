"""How a launched runtime lets go: the shutdown's grace period, the worker's drain (SIGTERM), and
what a Ctrl-C during either does (``process/interrupts.py``). The order of the parts' own
shutdown is ``Launched.close``'s.
"""

from __future__ import annotations

import threading

from ..process import dbos_private, interrupts
from .launched import Launched

#: Seconds a drain gives DBOS's event loop to stop once the drain's wait is over: its tasks are
#: cancelled and unwind in milliseconds unless a body blocks the loop, which no wait would end.
DRAIN_LOOP_STOP = 1.0


def shutdown(launched: Launched, wait_seconds: float) -> None:
    """``launched`` taken down, its runs given ``wait_seconds`` to reach DBOS's own end; a Ctrl-C
    during it ends the grace period at once and is raised when the shutdown is done."""
    hurry = threading.Event()
    with interrupts.hurried_by_ctrl_c(hurry):
        launched.close(wait_seconds, hurry)


def drain(launched: Launched, timeout: float, hurry: threading.Event | None) -> list[str]:
    """No more dequeues, the runs in flight here given up to ``timeout`` seconds, then shut down;
    the ids of the runs left in flight. ``hurry`` (set: the operator's second signal) ends the wait."""
    left: list[str] = []
    if launched.runner is not None and launched.runner.owns_dbos:
        left = dbos_private.wait_active(timeout, hurry)
    # The drain's deadline is the operator's: DBOS's event loop gets DRAIN_LOOP_STOP seconds to
    # stop, not its own 10 s, which a body blocking the loop used to add to every drain.
    hurried = threading.Event()
    with interrupts.hurried_by_ctrl_c(hurried):
        launched.close(0, hurried, loop_stop=DRAIN_LOOP_STOP)
    return left
