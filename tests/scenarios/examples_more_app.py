"""More of pydantic-ai's own examples under ``hx.Runtime``, one example a process, only the model swapped.

    python -m tests.scenarios.examples_more_app --db URL --example NAME

One process each because three of them bind their agent to the same module variable, ``agent``,
which is the name the runtime infers for each (as pydantic-ai does): one runtime cannot serve two
agents of one name. Each runs as its ``__main__`` runs it (``run_sync``, or ``asyncio.run`` of its
``main``): through ``Runtime.run_here``, so its agent code runs on this thread. The models are
swapped with ``agent.override(model=TestModel())``; the agents that a tool body runs with
pydantic-ai's own ``agent.run`` (medical_agent_delegation's specialists) are swapped with
pydantic-ai's public setter, since an override held here does not reach a body's context. Prints
one JSON line: the run's status, error, output and calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any

for _key in ("OPENAI_API_KEY", "GROQ_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.setdefault(_key, "unused-the-model-is-swapped")

from pydantic_ai.models.test import TestModel  # noqa: E402

import helix_dbos as hx  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--example", required=True)
    args = parser.parse_args()
    factories: dict[str, Any] = {}
    deps: Any = None
    if args.example == "pydantic_model":
        from tests.scenarios.pydantic_ai_examples import pydantic_model as module

        agent, message = module.agent, "The windy city in the US of A."
    elif args.example == "stream_markdown":
        from tests.scenarios.pydantic_ai_examples import stream_markdown as module  # type: ignore[no-redef]

        agent, message = module.agent, "Show me a short example of using Pydantic."
    elif args.example == "stream_whales":
        from tests.scenarios.pydantic_ai_examples import stream_whales as module  # type: ignore[no-redef]

        agent, message = module.agent, "Generate me details of 5 species of Whale."
    elif args.example == "chat_app":
        from tests.scenarios.pydantic_ai_examples import chat_app as module  # type: ignore[no-redef]

        agent, message = module.agent, "What is the capital of France?"
    elif args.example == "medical_agent_delegation":
        from tests.scenarios.pydantic_ai_examples import medical_agent_delegation as module  # type: ignore[no-redef]

        for specialist in (module.gp_agent, module.cardiology_agent, module.neurology_agent, module.senior_doctor_agent):
            specialist.model = TestModel()
        agent = module.triage_agent
        message = "Patient P001, age 64\nComplaint: Sudden severe chest pain radiating to left arm."
        factories["triage_agent"] = lambda data: module.PatientInfo(**data)
        deps = {"patient_id": "P001", "age": 64, "known_conditions": ["hypertension"]}
    elif args.example == "flight_booking":  # its list and union agents, each beside plain agent.run_sync
        flight_booking_pair(args.db)
        return
    else:
        raise SystemExit(f"unknown example {args.example!r}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(agent.override(model=TestModel()))
        runtime = hx.Runtime([agent], database_url=args.db, deps_factories=factories).launch()
        try:
            name = next(iter(runtime.agents))
            result = runtime.run_here(name, message, deps=deps, timeout=120)
            calls = runtime.reader.calls(session_id=result.session_id)
            print(json.dumps({
                "name": name, "status": result.status, "error": result.error, "output": result.output,
                "calls": [{"tool": c["tool_name"], "kind": c["kind"], "status": c["status"], "result": c.get("result"),
                           "error": c.get("error")} for c in calls],
            }, default=str), flush=True)
        finally:
            runtime.shutdown()


def flight_booking_pair(db: str) -> None:
    """flight_booking's ``list[FlightDetails]`` and ``SeatPreference | Failed`` agents with TestModel,
    under plain ``run_sync`` and under ``hx.Runtime``: one JSON line with both outputs of each."""
    import pydantic

    from tests.scenarios.pydantic_ai_examples import flight_booking

    names = ("extraction_agent", "seat_preference_agent")  # as helix names them: their module's variables
    with flight_booking.extraction_agent.override(model=TestModel()), flight_booking.seat_preference_agent.override(model=TestModel()):
        plain = [pydantic.TypeAdapter(Any).dump_python(getattr(flight_booking, n).run_sync("go").output, mode="json") for n in names]
        runtime = hx.Runtime([getattr(flight_booking, n) for n in names], database_url=db).launch()
    try:
        results = [runtime.run_here(n, "go", timeout=120) for n in names]
        print(json.dumps({n: {"plain": p, "status": r.status, "output": r.output, "error": r.error}
                          for n, p, r in zip(names, plain, results, strict=True)}, default=str), flush=True)
    finally:
        runtime.shutdown()


if __name__ == "__main__":
    main()
