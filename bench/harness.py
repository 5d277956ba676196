"""Interleaved timing of the systems (``bench.systems``) in one process, on one DBOS and one database.

Why interleaved (A, B, C, A, B, C, ...): drift over time (database growth, autovacuum, CPU
frequency, the other tenant of a 2-vCPU box) hits every system equally instead of whichever
happened to run last, so the ratios between them hold even when the absolute times wander.

A system's factory builds its workflows against the *current* DBOS (after ``configure_dbos(url,
launch=False)``, before ``DBOS.launch()``). One that launches DBOS itself sets
``factory.LAUNCHES_DBOS = True`` and is built after the others (helix_dbos: ``Runtime.launch()``);
a runner with a ``close()`` is closed before DBOS is destroyed.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbos import DBOS, SetWorkflowID

from bench.workload import Runner, WorkloadSpec, expected_answer

RunnerFactory = Callable[[WorkloadSpec], Runner]

BENCH_EXECUTOR = "helix-bench"
"""One executor id for the bench process, shared by DBOS and the helix runtime (see `configure_dbos`)."""

BASELINE = "bare_dbos"
"""Ratios in the table are relative to this runner's time (the issue's b/a)."""


def systems() -> dict[str, RunnerFactory]:
    """The systems measured side by side, by runner name (imported here, when a section needs them)."""
    from bench.systems import bare, helix, pydantic_ai

    return {"bare_dbos": bare.make_runner, "pydantic_ai_dbos": pydantic_ai.make_runner, "helix_dbos": helix.make_runner}


# --------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_s: Sequence[float]) -> dict[str, float]:
    """Wall-time stats in milliseconds (plus sequential runs/s)."""
    ms = sorted(s * 1000.0 for s in samples_s)
    mean = statistics.fmean(ms) if ms else math.nan
    return {
        "n": float(len(ms)),
        "mean_ms": mean,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "min_ms": ms[0] if ms else math.nan,
        "max_ms": ms[-1] if ms else math.nan,
        "stdev_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0,
        "runs_per_s": 1000.0 / mean if ms and mean > 0 else math.nan,
    }


async def _call(runner: Runner) -> Any:
    result = runner()
    if inspect.isawaitable(result):
        result = await result
    return result


async def ameasure(runners: Mapping[str, Runner], n: int, warmup: int) -> dict[str, dict[str, float]]:
    """Async `measure`: use it when already inside an event loop."""
    names = list(runners)
    for _ in range(warmup):
        for name in names:
            await _call(runners[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(n):
        for name in names:
            t0 = time.perf_counter()
            await _call(runners[name])
            samples[name].append(time.perf_counter() - t0)
    return {name: summarize(samples[name]) for name in names}


def measure(runners: Mapping[str, Runner], n: int, warmup: int) -> dict[str, dict[str, float]]:
    """Run `warmup` then `n` interleaved rounds (A, B, C, A, B, C, ...) and return per-runner wall-time stats.

    Runners may be sync or async; everything runs sequentially on one event loop, so the numbers are
    per-run latency including every checkpoint, not throughput under concurrency.
    """
    return asyncio.run(ameasure(runners, n, warmup))


def format_table(stats: Mapping[str, Mapping[str, float]], baseline: str = BASELINE, title: str = "") -> str:
    """Plain-text table; `x base` columns are this runner / baseline (mean and p50)."""
    base = stats.get(baseline)
    header = f"{'runner':<20} {'n':>4} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'runs/s':>8} {'x base(mean)':>13} {'x base(p50)':>12}"
    lines = [title, header, "-" * len(header)] if title else [header, "-" * len(header)]
    for name, s in stats.items():
        r_mean = s["mean_ms"] / base["mean_ms"] if base else math.nan
        r_p50 = s["p50_ms"] / base["p50_ms"] if base else math.nan
        lines.append(
            f"{name:<20} {int(s['n']):>4} {s['mean_ms']:>9.2f} {s['p50_ms']:>9.2f} {s['p95_ms']:>9.2f} "
            f"{s['runs_per_s']:>8.1f} {r_mean:>13.2f} {r_p50:>12.2f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Setup + CLI
# --------------------------------------------------------------------------------------------------


def launches_dbos(factory: RunnerFactory) -> bool:
    """True for factories that launch DBOS themselves (helix_dbos: `Runtime.launch()`); built last."""
    return bool(getattr(factory, "LAUNCHES_DBOS", False))


def setup_runners(
    url: str,
    factories: Mapping[str, RunnerFactory],
    spec: WorkloadSpec,
    *,
    executor_id: str | None = BENCH_EXECUTOR,
    reset: bool = True,
) -> dict[str, Runner]:
    """Configure DBOS on `url` (fresh registry, emptied system DB), build every runner, then launch.

    Building between configure and launch is what makes the workflows part of the launched registry
    (needed for recovery and for the app-version hash if it were not pinned). A factory that launches
    DBOS itself (helix_dbos) is built after all the others, so theirs are registered in time, and
    DBOS is launched here only if nobody did. The returned dict keeps the caller's order.

    `reset=False` on a database that holds a helix ledger: on SQLite, DBOS's truncate-reset empties
    every table of the file, the ledger's Alembic version table included, and the next
    `Runtime.launch()` then fails re-creating tables that exist.
    """
    from bench.dbs import configure_dbos

    configure_dbos(url, launch=False, executor_id=executor_id, reset=reset)
    order = sorted(factories, key=lambda name: launches_dbos(factories[name]))
    built = {name: factories[name](spec) for name in order}
    if not _dbos_launched():
        DBOS.launch()
    return {name: built[name] for name in factories}


def teardown_runners(runners: Mapping[str, Runner]) -> None:
    """Close runners that hold resources (the helix runtime), then destroy DBOS and its registry."""
    for runner in runners.values():
        close = getattr(runner, "close", None)
        if close is not None:
            close()
    DBOS.destroy(destroy_registry=True)


def _dbos_launched() -> bool:
    from helix_dbos.runtime.process.dbos_private import dbos_launched

    return dbos_launched()


async def probe(runners: Mapping[str, Runner], spec: WorkloadSpec, tag: str, answers: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """One identified run per runner: check the answer (``answers``: a runner's own expected answer,
    else the pydantic-ai script's) and count the checkpointed steps DBOS recorded."""
    out: dict[str, dict[str, Any]] = {}
    for name, runner in runners.items():
        expected = (answers or {}).get(name) or expected_answer(spec)
        wid = f"probe-{tag}-{name}"
        if hasattr(runner, "last_run_id"):  # helix_dbos picks its own workflow id: the run id
            answer = await _call(runner)
            wid = runner.last_run_id
        else:
            with SetWorkflowID(wid):
                answer = await _call(runner)
        steps = await DBOS.list_workflow_steps_async(wid)
        by_name: dict[str, int] = {}
        for step in steps:
            by_name[step["function_name"]] = by_name.get(step["function_name"], 0) + 1
        out[name] = {"answer_ok": answer == expected, "answer": answer, "steps": len(steps), "by_name": by_name}
    return out


def run_benchmark(
    url: str, names: Sequence[str], n: int, warmup: int, spec: WorkloadSpec | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """Configure, build, probe, measure. Returns (stats, probe info)."""
    spec = spec or WorkloadSpec()
    known = systems()
    factories = {name: known[name] for name in names}
    runners = setup_runners(url, factories, spec)
    tag = "sqlite" if url.startswith("sqlite") else "pg"

    async def go() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
        info = await probe(runners, spec, tag)
        stats = await ameasure(runners, n, warmup)
        return stats, info

    try:
        return asyncio.run(go())
    finally:
        teardown_runners(runners)
