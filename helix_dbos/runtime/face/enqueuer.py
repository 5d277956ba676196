"""The part of a launched runtime whose entries enqueue their runs rather than start them here: a
``DBOSClient`` over the API engine, whose ``enqueue_in_transaction`` writes the workflow's row in
the entry's own transaction (admitted iff queued)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ...definitions.limits import AgentLimits
from ...ledger.names import RUN_WORKFLOW
from ..floor.records import OpenedRun
from ..process import queues

if TYPE_CHECKING:
    from dbos import EnqueueOptions


def dbos_client(engine: sa.Engine, app_name: str) -> Any:
    """A ``DBOSClient`` over ``engine`` (its engine stays ours: ``Enqueuer.close`` leaves it be)."""
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    return DBOSClient(system_database_engine=engine, application_name=app_name, serializer=DBOSPortableJSONSerializer())


@dataclass(frozen=True)
class Enqueuer:
    """Enqueues the runs of every entry (``every_entry``: a front end, a worker), or of the agents
    with a limit only (one process: its other entries start their runs at once)."""

    client: Any  # dbos.DBOSClient
    limits: Mapping[str, AgentLimits]
    app_version: str
    every_entry: bool

    def enqueues(self, agent_name: str) -> bool:
        """Whether an entry into ``agent_name`` enqueues its run rather than starting it here."""
        return self.every_entry or queues.limited(agent_name, self.limits)

    def enqueue(self, conn: sa.Connection, opened: OpenedRun, priority: int | None) -> None:
        options: EnqueueOptions = {
            "queue_name": queues.entry_queue(opened.agent_name, self.limits),
            "workflow_name": RUN_WORKFLOW,
            "workflow_id": opened.run_id,
            "app_version": self.app_version,
            "queue_partition_key": queues.partition_key(opened.owner),
        }
        if priority is not None:
            options["priority"] = priority
        self.client.enqueue_in_transaction(conn, options, opened.run_id)

    def close(self) -> None:
        self.client.destroy()
