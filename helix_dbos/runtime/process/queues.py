"""The DBOS queues runs wait on when an entry enqueues them instead of starting them (docs/scaling.md).

An entry enqueues its run, in the gate's own transaction, when the process is a front end
(``mode="client"``) or a worker, or when the run's agent has ``max_running``. Such an agent has a
queue of its own, ``helix_entries.<agent>``, whose DBOS ``global_concurrency`` is that limit; every
other agent's runs share ``helix_entries``. Every entry queue is partitioned by the session's owner,
so DBOS dequeues owners in random order and one owner's burst does not stand in front of another's.

A queue's configuration is one row of ``dbos.queues``, which DBOS re-reads on every poll. Its
``global_concurrency`` (``max_running``) is what the last registration said; its per-worker values
(``worker_concurrency``, ``owner_share``) are written only by a process that sets them: a front end
or a worker launched without them keeps the row's, where it used to reset them to unlimited.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...definitions.limits import AgentLimits
from ...ledger.names import ENTRY_QUEUE, NO_OWNER_PARTITION, agent_entry_queue

#: Without a per-owner share, a partition's own per-worker limit must still be set (any partition
#: limit is what makes a DBOS queue partitioned): one no worker reaches.
UNCAPPED = 1_000_000


def limited(agent_name: str, limits: Mapping[str, AgentLimits]) -> bool:
    lim = limits.get(agent_name)
    return lim is not None and lim.max_running is not None


def entry_queue(agent_name: str, limits: Mapping[str, AgentLimits]) -> str:
    """The queue ``agent_name``'s entries wait on."""
    return agent_entry_queue(agent_name) if limited(agent_name, limits) else ENTRY_QUEUE


def partition_key(owner: str | None) -> str:
    return owner if owner else NO_OWNER_PARTITION


def child_queue(agent_name: str, limits: Mapping[str, AgentLimits]) -> str | None:
    """The queue a child run of ``agent_name`` (a remote sub-agent's run, a companion's turn) waits
    on when its agent has ``max_running``: the agent's own entry queue, so the limit counts every run
    of the agent in flight, entries and children alike. None: the children's queue, as before."""
    return entry_queue(agent_name, limits) if limited(agent_name, limits) else None


def delegation_cycles(children: Mapping[str, Iterable[str]], limits: Mapping[str, AgentLimits]) -> list[list[str]]:
    """Each agent with ``max_running`` that can reach itself through remote or companion sub-agents,
    with the path: a parent waits for its child while holding its own slot, so a run of such an
    agent can wait for a slot that only runs waiting on it hold (docs/scaling.md, "Where it stops")."""
    cycles = []
    for start in sorted(a for a in children if limited(a, limits)):
        stack: list[list[str]] = [[start, c] for c in children.get(start, ())]
        seen: set[str] = set()
        while stack:
            path = stack.pop()
            if path[-1] == start:
                cycles.append(path)
                break
            if path[-1] in seen:
                continue
            seen.add(path[-1])
            stack.extend([*path, c] for c in children.get(path[-1], ()))
    return cycles


@dataclass(frozen=True)
class QueueSettings:
    """How the entry queues are registered: runs per worker, runs per owner per worker, polling."""

    worker_concurrency: int | None
    owner_share: int | None
    polling_interval: float


def register_entry_queues(register: Callable[..., Any], agent_names: Iterable[str], limits: Mapping[str, AgentLimits], settings: QueueSettings) -> list[str]:
    """Register (upsert) every entry queue of these agents with ``register`` (``DBOS.register_queue``
    or ``DBOSClient.register_queue``); their names."""
    queues: dict[str, int | None] = {ENTRY_QUEUE: None}
    for name in agent_names:
        if limited(name, limits):
            queues[entry_queue(name, limits)] = limits[name].max_running
    sets_workers = settings.worker_concurrency is not None or settings.owner_share is not None
    for queue, global_concurrency in queues.items():
        worker, owner_share = settings.worker_concurrency, settings.owner_share
        if not sets_workers:  # keep what the workers wrote (the row is created first if missing)
            row = register(queue, global_concurrency=global_concurrency, partition_worker_concurrency=min(global_concurrency or UNCAPPED, UNCAPPED),
                           polling_interval_sec=settings.polling_interval, on_conflict="never_update")
            worker, owner_share = row.worker_concurrency, row.partition_worker_concurrency
        if worker is not None and global_concurrency is not None:
            worker = min(worker, global_concurrency)
        share = min(v for v in (owner_share, worker, global_concurrency, UNCAPPED) if v is not None)
        register(
            queue,
            global_concurrency=global_concurrency,
            worker_concurrency=worker,
            partition_worker_concurrency=share,
            polling_interval_sec=settings.polling_interval,
            on_conflict="always_update",
        )
    return list(queues)
