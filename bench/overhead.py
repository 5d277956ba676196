"""Sections 1-3: per-run time against the floor and the peer, and the write cost per step and call.

Time (sections 1-2): bare DBOS loop, Pydantic AI's DBOSDurability and helix_dbos run the same
script in one process on one DBOS launch, interleaved (A, B, C, A, B, C, ...), so drift and the
other tenants of the machine hit all three alike. Ratios are the result; absolute times are context.

Write cost (section 3): the same three runners, counted with SQLAlchemy events instead of timed.
Counts are deterministic, so four workload shapes solve exactly for the cost of one call, of one
step (with 0 and with 3 calls) and of the per-run remainder (entry, final text step, result read).
helix_dbos writes the gates (and the results) of a step's calls that run side by side in one
transaction (``runtime/floor/group_commit.py``), so a call alone and a call beside others cost apart; the
fourth shape runs the same calls one after another (``sequential`` tools) to price one on its own:
    C(5 x 3, one at a time) - C(5 x 1) = 10 calls alone      ->  per call
    C(5 x 3)                - C(5 x 1) = 10 calls beside two ->  per call beside others (marginal)
    C(10 x 3)               - C(5 x 3) = 5 steps of 3        ->  per step with 3 calls
    step with 3 calls one at a time - 3 calls alone           ->  per step with no call
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.dbcount import DbCounter, EngineCounts, attach_standard, totals
from bench.harness import (
    ameasure,
    probe,
    setup_runners,
    systems,
    teardown_runners,
)
from bench.workload import WorkloadSpec

RUNNERS = ("bare_dbos", "pydantic_ai_dbos", "helix_dbos")


def _factories(names: tuple[str, ...] = RUNNERS) -> dict[str, Any]:
    known = systems()
    return {name: known[name] for name in names}


@dataclass
class OverheadResult:
    stats: dict[str, dict[str, float]]
    probe: dict[str, dict[str, Any]]


def openai_agents_installed() -> bool:
    """Whether the OpenAI Agents SDK and its DBOS integration are here (``pip install -e ".[test]"``)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("agents", "dbos_openai_agents"))


def _with_openai_agents(spec: WorkloadSpec) -> tuple[dict[str, Any], dict[str, str]]:
    """The three runners plus the OpenAI Agents SDK pair: ``dbos_openai_agents`` (its DBOS
    integration) and ``helix_openai_agents`` (the same SDK agent on the helix runner's runtime, added
    once it is built: one runtime per process)."""
    from bench.systems import helix as helix_system
    from bench.systems import openai_agents as oai

    factories = _factories()

    def helix_with_sdk_agent(spec: WorkloadSpec) -> Any:
        return helix_system.HelixRunner(spec, agents=[oai.make_agent(spec, safe=True)])

    helix_with_sdk_agent.LAUNCHES_DBOS = True  # type: ignore[attr-defined]
    factories["helix_dbos"] = helix_with_sdk_agent
    factories["dbos_openai_agents"] = oai.make_peer_runner
    answer = oai.expected_answer(spec)
    return factories, {"dbos_openai_agents": answer, "helix_openai_agents": answer}


def run_overhead(url: str, n: int, warmup: int, spec: WorkloadSpec | None = None, openai_agents: bool | None = None) -> OverheadResult:
    """Interleaved per-run wall time of the runners on one DBOS launch: the three pydantic-ai shapes,
    and (``openai_agents``, default: when installed) the OpenAI Agents SDK under its DBOS
    integration and under helix."""
    spec = spec or WorkloadSpec()
    if openai_agents is None:
        openai_agents = openai_agents_installed()
    answers: dict[str, str] = {}
    factories = _factories()
    if openai_agents:
        factories, answers = _with_openai_agents(spec)
    runners = setup_runners(url, factories, spec, reset=False)  # fresh database
    if openai_agents:
        from bench.systems.openai_agents import HelixOpenAIRunner

        runners["helix_openai_agents"] = HelixOpenAIRunner(spec, runners["helix_dbos"])
    tag = "sqlite" if url.startswith("sqlite") else "pg"

    async def go() -> OverheadResult:
        info = await probe(runners, spec, tag, answers)
        stats = await ameasure(runners, n, warmup)
        return OverheadResult(stats, info)

    try:
        return asyncio.run(go())
    finally:
        teardown_runners(runners)


# --- write cost ---------------------------------------------------------------------------------

SHAPES = {"base": (5, 3, False), "long": (10, 3, False), "narrow": (5, 1, False), "alone": (5, 3, True)}


@dataclass
class CostFigures:
    """Per-unit counts for one runner: {unit: {"tx", "stmts", "rtt", "checkouts"}} (floats: exact
    differences of deterministic counts divided by the unit count)."""

    units: dict[str, dict[str, float]]
    by_engine_step3: dict[str, dict[str, float]] = field(default_factory=dict)
    by_table_step3: dict[str, float] = field(default_factory=dict)
    raw: dict[str, dict[str, int]] = field(default_factory=dict)
    deterministic: bool = True


def _count_one_run(runners: dict[str, Any], counter: DbCounter, name: str) -> dict[str, EngineCounts]:
    async def go() -> dict[str, EngineCounts]:
        from bench.harness import _call

        before = counter.snapshot()
        await _call(runners[name])
        await asyncio.sleep(0)  # let a commit listener on another thread finish its increment
        return counter.delta(counter.snapshot(), before)

    return asyncio.run(go())


def run_write_cost(url: str, repeats: int = 2) -> dict[str, CostFigures]:
    """Count transactions/statements/round trips per run for each shape and runner, then solve."""
    per_shape: dict[str, dict[str, dict[str, EngineCounts]]] = {}
    pre_ping: dict[str, bool] = {}
    deterministic = {name: True for name in RUNNERS}
    for shape, (steps, calls, one_at_a_time) in SHAPES.items():
        spec = WorkloadSpec(steps=steps, tools_per_step=calls, one_at_a_time=one_at_a_time)
        runners = setup_runners(url, _factories(), spec, reset=False)  # see setup_runners
        counter = DbCounter()
        try:
            attach_standard(counter, getattr(runners["helix_dbos"], "runtime"))  # noqa: B009 - a HelixRunner
            pre_ping = dict(counter.pre_ping)
            per_shape[shape] = {}
            for name in RUNNERS:
                asyncio.run(_warm(runners[name]))
                samples = [_count_one_run(runners, counter, name) for _ in range(repeats)]
                firsts = [totals(s, pre_ping)["tx"] for s in samples]
                if len(set(firsts)) > 1:
                    deterministic[name] = False
                per_shape[shape][name] = min(samples, key=lambda s: totals(s, pre_ping)["stmts"])
        finally:
            counter.detach()
            teardown_runners(runners)

    out: dict[str, CostFigures] = {}
    for name in RUNNERS:
        c = {shape: totals(per_shape[shape][name], pre_ping) for shape in SHAPES}
        base, long_, narrow, alone = c["base"], c["long"], c["narrow"], c["alone"]
        keys = ("tx", "stmts", "rtt", "checkouts")
        per_call = {k: (alone[k] - narrow[k]) / (5 * 2) for k in keys}
        per_call_beside = {k: (base[k] - narrow[k]) / (5 * 2) for k in keys}
        per_step3 = {k: (long_[k] - base[k]) / 5 for k in keys}
        per_step0 = {k: per_step3[k] + (alone[k] - base[k]) / 5 - 3 * per_call[k] for k in keys}
        per_run = {k: base[k] - 5 * per_step3[k] for k in keys}
        engines = per_shape["base"][name]
        by_engine = {
            label: {
                "tx": (per_shape["long"][name][label].tx - engines[label].tx) / 5,
                "stmts": (per_shape["long"][name][label].stmts - engines[label].stmts) / 5,
                "rtt": (per_shape["long"][name][label].rtt(pre_ping[label]) - engines[label].rtt(pre_ping[label])) / 5,
            }
            for label in engines
        }
        tables: Counter[str] = Counter()
        for label in engines:
            tables.update(per_shape["long"][name][label].by_table)
            tables.subtract(engines[label].by_table)
        out[name] = CostFigures(
            units={"run (5x3 workload)": {k: float(base[k]) for k in keys}, "step with 3 calls": per_step3, "step, no call": per_step0, "call": per_call,
                   "call beside two others (marginal)": per_call_beside, "per-run remainder": per_run},
            by_engine_step3=by_engine,
            by_table_step3={t: v / 5 for t, v in tables.items() if v},
            raw=c,
            deterministic=deterministic[name],
        )
    return out


async def _warm(runner: Any) -> None:
    from bench.harness import _call

    await _call(runner)
