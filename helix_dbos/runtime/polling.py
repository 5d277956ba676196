"""What a launched runtime polls, and how often: most of an idle worker's database traffic.

DBOS's pollers run in every process whatever it does (docs/operations.md, "What an idle worker
costs the database"); these choices keep helix's own additions to them small.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from ..definitions import Agent
from . import dbos_private

log = logging.getLogger("helix_dbos")

#: DBOS's internal queue (recovery, ``dbos workflow resume``) is polled this often for the first
#: seconds after launch, so a relaunch picks up its pending runs at once; then every
#: ``HELIX_DBOS_RECOVERY_POLL`` seconds (config.DEFAULT_RECOVERY_POLL).
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


def fast_then(seconds: float) -> threading.Timer:
    """Poll the internal queue fast now and every ``seconds`` after the first seconds; the timer
    is for ``shutdown`` to cancel (a later runtime in the process must not inherit it)."""
    set_internal_queue_polling(FAST_RECOVERY_POLL)
    timer = threading.Timer(FAST_RECOVERY_SECONDS, set_internal_queue_polling, (seconds,))
    timer.daemon = True
    timer.start()
    return timer
