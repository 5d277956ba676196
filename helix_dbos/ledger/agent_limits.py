"""The agents' limits the fleet agreed on, per application version: recorded once, compared at every launch.

Why: every process declares an agent's limits in its own code, and which DBOS queue an agent's runs
wait on follows from them (``runtime/process/queues.py``). A front end and workers that disagree
were silent: with ``max_running`` on the front end only, runs waited on a queue no worker served;
on the workers only, the front end's runs went to the shared queue and the limit was bypassed. So
the first process of an application version that defines an agent records its limits here, and a
later launch of the same version that defines other ones is told which agent and both values.
Another application version has its own record (a deploy that changes a limit under a new version
starts clean); ``replace`` writes this process's over the record (a limit changed on purpose).

One transaction: every row inserted if absent, then all of them read ``FOR UPDATE`` (so of two
first launches at once, the second compares against what the first wrote) and compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

import sqlalchemy as sa

from . import tables as t
from .rows import insert_if_absent


class LimitValues(TypedDict):
    """One agent's limits as a row holds them (None: no such limit)."""

    max_running: int | None
    model_requests: int | None
    model_requests_period: float | None


class RecordedLimits(LimitValues):
    recorded_by: str
    recorded_at: datetime


class Disagreement(TypedDict):
    """An agent whose limits in this process differ from the fleet's record."""

    agent_name: str
    recorded: RecordedLimits
    defined: LimitValues


def _values(row: Mapping[Any, Any]) -> LimitValues:
    max_running, requests, period = row["max_running"], row["model_requests"], row["model_requests_period"]
    return {
        "max_running": max_running if isinstance(max_running, int) else None,
        "model_requests": requests if isinstance(requests, int) else None,
        "model_requests_period": float(period) if isinstance(period, (int, float)) else None,
    }


def agree(conn: sa.Connection, application_version: str, limits: Mapping[str, LimitValues], *, recorded_by: str, at: datetime, replace: bool) -> list[Disagreement]:
    """Record ``limits`` (by agent name) for ``application_version`` where the fleet has none, and
    the agents whose record differs (empty: the fleet agrees). With ``replace`` the differing
    records are overwritten with this process's and nothing is reported."""
    if not limits:
        return []
    insert = insert_if_absent(conn.dialect.name, t.agent_limits)
    names = sorted(limits)
    conn.execute(insert, [{"application_version": application_version, "agent_name": name, **limits[name], "recorded_by": recorded_by, "recorded_at": at} for name in names])
    table = t.agent_limits
    rows = conn.execute(
        sa.select(table).where(table.c.application_version == application_version, table.c.agent_name.in_(names)).order_by(table.c.agent_name).with_for_update()
    ).mappings().all()
    out: list[Disagreement] = []
    for row in rows:
        name = str(row["agent_name"])
        recorded = _values(row)
        if recorded == _values(dict(limits[name])):
            continue
        if replace:
            conn.execute(
                table.update()
                .where(table.c.application_version == application_version, table.c.agent_name == name)
                .values(**limits[name], recorded_by=recorded_by, recorded_at=at)
            )
            continue
        out.append({"agent_name": name, "recorded": {**recorded, "recorded_by": str(row["recorded_by"]), "recorded_at": row["recorded_at"]}, "defined": limits[name]})
    return out
