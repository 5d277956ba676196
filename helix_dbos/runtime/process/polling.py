"""What a launched runtime polls, and how often: most of an idle worker's database traffic.

DBOS's pollers run in every process whatever it does (docs/operations.md, "What an idle worker
costs the database"); these choices keep helix's own additions to them small.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from ...definitions import Agent
from . import dbos_private

log = logging.getLogger("helix_dbos")

#: DBOS's internal queue (recovery, takeovers, ``dbos workflow resume``) is polled this often for
#: the first seconds after a launch that finds pending runs of its executor, so a relaunch starts
#: them at once; otherwise every ``HELIX_DBOS_RECOVERY_POLL`` seconds (settings.DEFAULT_RECOVERY_POLL).
#: Only a launch can choose: the interval is set before DBOS starts the queue's thread, which reads
#: it then; later, a shorter interval applies only after the thread's current wait, and DBOS decays
#: toward it by 10% a poll, so a takeover's runs wait for the next poll whatever is set.
FAST_RECOVERY_POLL, FAST_RECOVERY_SECONDS = 0.05, 5.0


def serves_children_queue(agents: Iterable[Agent]) -> bool:
    """``Runtime(serve_queue=None)``: poll the children's queue only in a process that defines an
    agent with a remote or companion sub-agent, since polling it is most of an idle runtime's
    traffic; a worker that defines only the child agents says ``serve_queue=True``."""
    return any(s.mode in ("remote", "companion") for a in agents for s in a.sub_agents)


def set_internal_queue_polling(seconds: float) -> None:
    """DBOS offers no public setting for its internal queue's interval; if the private hook moves,
    DBOS's default 1 s still works (a relaunch just takes up to a second longer)."""
    try:
        dbos_private.set_internal_queue_polling(seconds)
    except Exception:  # an internal API changed: keep DBOS's default polling
        log.warning("could not set DBOS's internal queue polling; recovery may take a second longer", exc_info=True)


class InternalQueuePolling:
    """How often this process polls DBOS's internal queue: slow, or fast for the first seconds of
    a launch that finds work there, so that neither an idle worker pays a fast poll for ever nor a
    relaunch waits a slow one. ``stop`` (at shutdown) cancels the pending slow-down,
    so a later runtime in the process does not inherit it."""

    def __init__(self, slow: float) -> None:
        self.slow = slow
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def settle(self) -> None:
        set_internal_queue_polling(self.slow)

    def fast(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            set_internal_queue_polling(FAST_RECOVERY_POLL)
            self._timer = threading.Timer(FAST_RECOVERY_SECONDS, self.settle)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
