"""Ctrl-C during ``Runtime.shutdown``: a second one hurries the shutdown instead of cutting it in half.

The first Ctrl-C of a script raises ``KeyboardInterrupt`` and its ``with hx.Runtime(...)`` (or
``finally``) shuts the runtime down, which gives runs in flight a grace period and then has DBOS
cancel their tasks, so they stay ``PENDING`` for the next launch. A second Ctrl-C inside that
shutdown raised ``KeyboardInterrupt`` there, so DBOS was never destroyed: the interpreter went on
exiting while the workflows still ran, their next ledger write was refused by the exiting
interpreter, and DBOS recorded ``ERROR`` with the ledger run ``running``. Here the
shutdown takes Ctrl-C itself: one arriving during it ends the grace period at once, the shutdown
finishes its steps, and the interrupt is raised when it returns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def hurried_by_ctrl_c(hurry: threading.Event) -> Iterator[None]:
    """While inside, SIGINT sets ``hurry`` instead of raising; raise ``KeyboardInterrupt`` on leaving
    if one came. Only on the main thread (where Python handles signals) and only over Python's own
    handler: an application's SIGINT handler is left as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        came.append(signum)
        hurry.set()

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if came:
            raise KeyboardInterrupt
