"""The process's shape (``Runtime(mode=...)``, docs/scaling.md), as the parts a launch composes.

A mode is not a branch taken here and there: it is which parts the launched runtime holds
(``launched.py``). A front end (``client``) holds the store and an ``Enqueuer``: it admits and
enqueues, and has no ``Runner`` (no DBOS launch, no executor): it cannot run anything. A
``worker`` holds a ``Runner`` that serves every entry queue, and an ``Enqueuer`` (its entries
enqueue too). One ``process`` holds a ``Runner`` that starts its entries' runs itself, and an
``Enqueuer`` only when an agent has a limit (whose runs wait on their agent's queue).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ledger.names import ENTRY_QUEUE
from ...settings import Mode
from ..process import queues
from .config import RuntimeConfig


@dataclass(frozen=True)
class Shape:
    """What one mode composes."""

    mode: Mode
    #: Launches DBOS and holds an executor id: the launched runtime has a ``Runner``.
    runs: bool
    #: Every entry enqueues its run (none starts here): the launched runtime always has an ``Enqueuer``.
    enqueues_every_entry: bool
    #: Its DBOS serves every entry queue (a worker), not only its limited agents' ones.
    serves_every_entry_queue: bool


SHAPES: dict[Mode, Shape] = {
    "process": Shape("process", runs=True, enqueues_every_entry=False, serves_every_entry_queue=False),
    "client": Shape("client", runs=False, enqueues_every_entry=True, serves_every_entry_queue=False),
    "worker": Shape("worker", runs=True, enqueues_every_entry=True, serves_every_entry_queue=True),
}


def shape_of(config: RuntimeConfig, mode_variable: Mode) -> Shape:
    """``Runtime(mode=)``, else ``HELIX_DBOS_MODE`` (checked by ``EnvSettings``), else ``process``."""
    return SHAPES[config.mode or mode_variable]


def has_enqueuer(shape: Shape, config: RuntimeConfig) -> bool:
    """Whether any entry of this runtime enqueues its run (so it needs a ``DBOSClient``)."""
    return shape.enqueues_every_entry or bool(config.limits)


def listened_queues(shape: Shape, config: RuntimeConfig) -> list[str] | None:
    """The queues DBOS serves here (None: every queue of the app). A worker serves every entry
    queue, and the children's queue if ``serve_queue``; a single process its own entry queues
    (an agent with a limit) and, if ``serve_queue``, the children's queue; nothing else it would
    otherwise poll for nothing: an idle poll of a queue costs each worker 10 claims a second
    (~6 ms of worker CPU per run at 1,000 sessions on 2 workers, docs/benchmarks.md)."""
    limits = config.limits
    entry = sorted({queues.entry_queue(name, limits) for name in limits if queues.limited(name, limits)})
    if shape.serves_every_entry_queue:
        return None if config.serve_queue else [ENTRY_QUEUE, *entry]
    if config.serve_queue:
        return None if not entry else [config.queue_name, *entry]
    return entry
