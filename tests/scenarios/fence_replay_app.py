"""A real application process whose DBOS step is refused by the run fence, killed and relaunched.

    python -m tests.scenarios.fence_replay_app --db URL --effects DIR --executor ID start|wake --session SID

``start`` runs one helix run to its end, then starts the probe workflow: its one DBOS step (through
``durable.step``, with helix's own DBOS configuration and serializer) passes the fence of that run
from a workflow that is not the run's, so the fence refuses it and DBOS records the refusal as the
step's error. The probe writes what it caught (``caught.jsonl``) and waits to be killed. ``wake``
relaunches the executor: DBOS recovers the probe, replays the step from its record (the step body
does not run again: ``step_bodies.jsonl`` counts it) and the probe writes what it caught then.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.runtime.floor import durable, fence
from tests.scenarios import effects

EFFECTS: Path | None = None
RUNTIME: hx.Runtime | None = None


async def refused_step(run_id: str) -> None:
    effects.append(EFFECTS, "step_bodies", {"pid": os.getpid()})

    def check() -> None:
        assert RUNTIME is not None
        with RUNTIME.engine.begin() as conn:  # the launched runtime's own engine (the probe is no helix workflow)
            fence.check(conn, run_id, "probe")

    await asyncio.to_thread(check)


@DBOS.workflow(name="fence_replay.probe")
async def probe(run_id: str) -> str:
    try:
        await durable.step({"name": "fence_replay.refused"}, refused_step, run_id)
    except Exception as exc:  # noqa: BLE001 - what DBOS raised is what the probe reports
        revived = fence.refusal(exc)
        effects.append(EFFECTS, "caught", {
            "pid": os.getpid(),
            "class": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "is_fenced": fence.is_fenced(exc),
            "refusal": None if revived is None else {"class": type(revived).__name__, "message": revived.message, "detail": revived.detail},
        })
    assert EFFECTS is not None
    while not (EFFECTS / "release").exists():  # the first execution is killed here
        await asyncio.sleep(0.05)
    return "released"


def main(argv: list[str]) -> int:
    global EFFECTS, RUNTIME
    args = effects.app_args(argv)
    EFFECTS = Path(args.effects)
    agent = hx.Agent("plain", TestModel(call_tools=[], custom_output_text="done"))
    rt = RUNTIME = hx.Runtime([agent], database_url=args.db, executor_id=args.executor).launch()
    probe_id = f"probe-{args.session}"
    try:
        out: dict[str, Any]
        if args.cmd == "start":
            result = rt.start("plain", "go", session_id=args.session).result(timeout=60)
            print(json.dumps({"run_id": result.run_id, "status": result.status}), flush=True)
            with SetWorkflowID(probe_id):
                DBOS.start_workflow(probe, result.run_id)
        out = {"probe": DBOS.retrieve_workflow(probe_id).get_result()}
        print(json.dumps(out), flush=True)
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
