"""Section 4: storage growth of ONE long session, carried over many runs (turns).

The design keeps the conversation out of DBOS step inputs and outputs (a run's input is its id; the
model step reads the transcript from the ledger and records only the new reply), so each step
should add the same bytes whether it is step 10 or step 200. A runtime that checkpointed the
history per step would add bytes proportional to the step number (storage quadratic in length).

Method: helix configures DBOS itself here (its production config: JSON serializer), on a fresh
database. One session; each turn is `runtime.start(agent, msg, session_id=sid)` and runs
`steps_per_turn - 1` steps of 3 tool calls plus a final text step. After every turn the database
is measured; the figure "at step N" is the growth over the turn that ends at step N, per step.
Also read back: the largest DBOS step output and workflow input of the first and the last turn,
which is where a leaked history would show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from bench.dbs import database_sizes
from bench.systems.helix import TURN_AGENT_NAME, make_turn_agent
from bench.workload import WorkloadSpec
from helix_dbos.runtime.process.dbos_private import system_table

MARKS = (10, 50, 100, 200)


@dataclass
class StorageResult:
    steps_per_turn: int
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per mark
    first_last: dict[str, dict[str, int]] = field(default_factory=dict)
    per_table_last: dict[str, float] = field(default_factory=dict)


def _dbos_payload_sizes(url: str, run_ids: list[str]) -> dict[str, int]:
    """Largest step output and workflow input DBOS stored for these runs (bytes of serialized text)."""
    sqlite = url.startswith("sqlite")
    ops = system_table("operation_outputs", sqlite=sqlite)
    wfs = system_table("workflow_input", sqlite=sqlite)
    length = "length" if sqlite else "octet_length"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            params = {f"r{i}": r for i, r in enumerate(run_ids)}
            names = ", ".join(f":r{i}" for i in range(len(run_ids)))
            model = conn.execute(
                sa.text(f"SELECT coalesce(max({length}(output)), 0) FROM {ops} WHERE workflow_uuid IN ({names}) AND function_name = 'helix.model'"),
                params,
            ).scalar()
            any_step = conn.execute(sa.text(f"SELECT coalesce(max({length}(output)), 0) FROM {ops} WHERE workflow_uuid IN ({names})"), params).scalar()
            inputs = conn.execute(sa.text(f"SELECT coalesce(max({length}(inputs)), 0) FROM {wfs} WHERE workflow_uuid IN ({names})"), params).scalar()
    finally:
        engine.dispose()
    return {"max_model_step_output": int(model or 0), "max_step_output": int(any_step or 0), "max_workflow_input": int(inputs or 0)}


class ModelStepTimer:
    """Wall time inside the model step, and the part of it spent reading and validating the
    transcript, per turn. Measurement only: wraps the functions, changes nothing they do."""

    def __init__(self) -> None:
        self.total = 0.0
        self.transcript = 0.0
        self.model = 0.0  # inside pydantic-ai's model_request: the (scripted) model and its message mapping
        self._undo: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        import functools

        import pydantic_ai.direct

        from helix_dbos.runtime.flow import model_request, workflow
        from helix_dbos.runtime.floor import transcript

        def timed_sync(into: str, fn: Any) -> Any:
            """``fn``, its wall time added to ``self.<into>``."""

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    setattr(self, into, getattr(self, into) + time.perf_counter() - t)

            return wrapper

        def timed_async(into: str, fn: Any) -> Any:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    setattr(self, into, getattr(self, into) + time.perf_counter() - t)

            return wrapper

        for module, attr, new in (
            (pydantic_ai.direct, "model_request", timed_async("model", pydantic_ai.direct.model_request)),  # the model_request module imports it at each call
            (model_request, "_read", timed_sync("transcript", model_request._read)),
            (transcript, "load", timed_sync("transcript", transcript.load)),
            (model_request, "one_request", timed_async("total", model_request.one_request)),  # what model_request.ask calls
            # a run's first model request reads in the prepare's transaction: still the request's time
            (workflow, "preread", timed_sync("total", model_request.preread)),  # through the workflow module's name
        ):
            self._undo.append((module, attr, getattr(module, attr)))
            setattr(module, attr, new)

    def uninstall(self) -> None:
        for module, attr, old in reversed(self._undo):
            setattr(module, attr, old)
        self._undo.clear()

    def take(self) -> tuple[float, float, float]:
        out = (self.total, self.transcript, self.model)
        self.total = self.transcript = self.model = 0.0
        return out


def run_storage(
    url: str, total_steps: int = 200, steps_per_turn: int = 10, executor_id: str = "helix-bench-storage"
) -> StorageResult:
    import helix_dbos as hx

    spec = WorkloadSpec(steps=steps_per_turn - 1, tools_per_step=3)
    runtime = hx.Runtime([make_turn_agent(spec)], database_url=url, executor_id=executor_id).launch()
    out = StorageResult(steps_per_turn)
    try:
        sizes = [database_sizes(url)]
        times: list[float] = []
        model_times: list[tuple[float, float, float]] = []
        timer = ModelStepTimer()
        timer.install()
        runs: list[str] = []
        sid: str | None = None
        turns = total_steps // steps_per_turn
        for turn in range(turns):
            t0 = time.perf_counter()
            result = runtime.start(TURN_AGENT_NAME, f"turn {turn}", session_id=sid).result()
            times.append(time.perf_counter() - t0)
            model_times.append(timer.take())
            if result.status != "completed":
                raise RuntimeError(f"storage turn {turn} ended {result.status}: {result.error_code} {result.error}")
            sid = result.session_id
            runs.append(result.run_id)
            sizes.append(database_sizes(url))
        timer.uninstall()
        view = runtime.session(sid) if sid else None
        steps_done = len([m for m in view.messages if type(m).__name__ == "ModelResponse"]) if view else 0
        if steps_done != total_steps:
            raise RuntimeError(f"session has {steps_done} model replies, expected {total_steps}")
        groups = [g for g in sizes[-1] if g in ("helix", "dbos")]
        for mark in MARKS:
            if mark > total_steps:
                continue
            turn = mark // steps_per_turn  # sizes[turn] is after the turn ending at `mark`
            row: dict[str, Any] = {
                "step": mark,
                "ms_per_step": times[turn - 1] * 1000 / steps_per_turn,
                "model_request_ms": model_times[turn - 1][0] * 1000 / steps_per_turn,
                "transcript_ms": model_times[turn - 1][1] * 1000 / steps_per_turn,
                "model_ms": model_times[turn - 1][2] * 1000 / steps_per_turn,
            }
            for g in groups:
                for metric in ("live", "disk"):
                    before = sizes[turn - 1][g].get(metric, 0)
                    after = sizes[turn][g].get(metric, 0)
                    row[f"{g}_{metric}"] = (after - before) / steps_per_turn
                    row[f"{g}_{metric}_total"] = after
            if "file" in sizes[turn]:
                row["file_disk"] = (sizes[turn]["file"]["disk"] - sizes[turn - 1]["file"]["disk"]) / steps_per_turn
                row["file_disk_total"] = sizes[turn]["file"]["disk"]
            out.rows.append(row)
        out.first_last = {"first turn": _dbos_payload_sizes(url, runs[:1]), "last turn": _dbos_payload_sizes(url, runs[-1:])}
        last, prev = sizes[-1], sizes[-2]
        for g in groups:
            for key, value in last[g].items():
                if key.startswith("live:"):
                    out.per_table_last[f"{g}.{key[5:]}"] = (value - prev[g].get(key, 0)) / steps_per_turn
    finally:
        runtime.shutdown()
    return out
