"""The ``usage`` table: one row per model request, and what a run's requests used, read with the
run (a result's ``usage``; built once: a wait reads ``run_with_usage`` each time it looks) or for
its usage limits.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from . import tables as t
from .rows import fetch_one, now


def totals_of_run(conn: sa.Connection, run_id: str) -> tuple[int, int, int]:
    """(requests, input tokens, output tokens) the run recorded."""
    u = t.usage.c
    row = conn.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(u.input_tokens), 0), sa.func.coalesce(sa.func.sum(u.output_tokens), 0)).where(u.run_id == run_id)
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def run_with_usage(conn: sa.Connection, run_id: str) -> dict[str, Any] | None:
    """A run's row and its usage (``usage_requests``, ``usage_input``, ``usage_output``) in one statement."""
    return fetch_one(conn, _run_and_usage(), {"w_run_id": run_id})


@functools.cache
def _run_and_usage() -> sa.Select[Any]:
    u = t.usage.c
    of_run = u.run_id == t.runs.c.run_id
    return sa.select(
        t.runs,
        sa.select(sa.func.count()).select_from(t.usage).where(of_run).scalar_subquery().label("usage_requests"),
        sa.select(sa.func.coalesce(sa.func.sum(u.input_tokens), 0)).where(of_run).scalar_subquery().label("usage_input"),
        sa.select(sa.func.coalesce(sa.func.sum(u.output_tokens), 0)).where(of_run).scalar_subquery().label("usage_output"),
    ).where(t.runs.c.run_id == sa.bindparam("w_run_id"))


def used_by_run(conn: sa.Connection, run_id: str) -> dict[str, int]:
    """What the run has used so far, as pydantic-ai's ``UsageLimits`` count it: the tokens of its
    recorded model requests (``input_tokens``, ``output_tokens``, ``total_tokens``) and its tool
    calls (``tool_calls``)."""
    u = t.usage.c
    row = conn.execute(
        sa.select(sa.func.coalesce(sa.func.sum(u.input_tokens), 0), sa.func.coalesce(sa.func.sum(u.output_tokens), 0),
                  sa.func.coalesce(sa.func.sum(u.total_tokens), 0)).where(u.run_id == run_id)
    ).one()
    calls = conn.execute(sa.select(sa.func.count()).select_from(t.calls).where(t.calls.c.run_id == run_id, t.calls.c.kind == "tool")).scalar()
    return {"input_tokens": int(row[0]), "output_tokens": int(row[1]), "total_tokens": int(row[2]), "tool_calls": int(calls or 0)}


_INSERT_USAGE = t.usage.insert()


def record_usage(conn: sa.Connection, session_id: str, run_id: str, step: int, model_name: str | None, u: Mapping[str, Any]) -> None:
    conn.execute(_INSERT_USAGE, {"session_id": session_id, "run_id": run_id, "step": step, "created_at": now(), **usage_values(model_name, u)})


def usage_values(model_name: str | None, u: Mapping[str, Any]) -> dict[str, Any]:
    """A usage row's own columns: the tokens as counted, the provider's whole record in ``details``."""
    inp, out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    return {"model_name": model_name, "input_tokens": inp, "output_tokens": out, "total_tokens": inp + out, "details": dict(u)}
