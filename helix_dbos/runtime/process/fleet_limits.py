"""A launch's agreement with the fleet on its agents' limits (``ledger/agent_limits.py``, docs/scaling.md).

Every launch (a front end, a worker, a single process) compares the limits it defines for each of its
agents with the record of its application version, writing the record where there is none; one
that differs is refused ``limits_mismatch`` naming the agent and both values, before the process
registers a queue, serves or enqueues anything. ``HELIX_DBOS_REPLACE_LIMITS=1`` makes the launch's
limits the record instead: a limit changed on purpose under the same application version.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from ...definitions.limits import AgentLimits
from ...errors import LimitsMismatchError
from ...ledger.agent_limits import Disagreement, LimitValues, agree
from ...ledger.engine import create_sync_engine
from ...ledger.rows import now


def values(limits: AgentLimits | None) -> LimitValues:
    requests = limits.model_requests if limits is not None else None
    return {
        "max_running": limits.max_running if limits is not None else None,
        "model_requests": requests[0] if requests is not None else None,
        "model_requests_period": float(requests[1]) if requests is not None else None,
    }


def shown(v: LimitValues) -> str:
    """A record as the user wrote it: ``AgentLimits(max_running=1)``, or ``no limits``."""
    parts = []
    if v["max_running"] is not None:
        parts.append(f"max_running={v['max_running']}")
    if v["model_requests"] is not None:
        parts.append(f"model_requests=({v['model_requests']}, {v['model_requests_period']:g})")
    return f"AgentLimits({', '.join(parts)})" if parts else "no limits"


#: A process's shape as the refusal names it.
_SHAPES = {"client": "a front end", "worker": "a worker", "process": "a single process"}


def _refusal(first: Disagreement, all_: list[Disagreement], mode: str, application_version: str) -> LimitsMismatchError:
    name, recorded, defined = first["agent_name"], first["recorded"], first["defined"]
    mode = _SHAPES.get(mode, mode)
    others = f" (and {len(all_) - 1} more agents)" if len(all_) > 1 else ""
    return LimitsMismatchError(
        f"agent {name!r}: this process ({mode}) defines {shown(defined)}, but the fleet's record for application version "
        f"{application_version!r} says {shown(recorded)} (recorded by {recorded['recorded_by']}){others}; every process of one "
        "version must define the same limits. Fix this process's limits, or change them on purpose: launch under a new "
        "application version, or launch with HELIX_DBOS_REPLACE_LIMITS=1 and restart the others (docs/scaling.md)",
        detail={
            "application_version": application_version,
            "disagreements": [
                {"agent": d["agent_name"], "this_process": shown(d["defined"]), "recorded": shown(d["recorded"]),
                 "recorded_by": d["recorded"]["recorded_by"], "recorded_at": d["recorded"]["recorded_at"].isoformat() if hasattr(d["recorded"]["recorded_at"], "isoformat") else str(d["recorded"]["recorded_at"])}
                for d in all_
            ],
        },
    )


def check(url: str, application_version: str, agent_names: Iterable[str], limits: Mapping[str, AgentLimits], *, mode: str, replace: bool) -> None:
    """Agree with the fleet's record, or raise ``LimitsMismatchError`` (nothing recorded then)."""
    wanted = {name: values(limits.get(name)) for name in agent_names}
    who = f"{_SHAPES.get(mode, mode)} (pid {os.getpid()} on {socket.gethostname()})"[:200]
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            found = agree(conn, application_version, wanted, recorded_by=who, at=now(), replace=replace)
            if found:  # raised inside the transaction: a refused launch records nothing
                raise _refusal(found[0], found, mode, application_version)
    finally:
        engine.dispose()
