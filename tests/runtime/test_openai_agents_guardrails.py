"""An OpenAI Agents SDK agent's ``input_guardrails`` and ``output_guardrails`` under ``hx.Runtime``
(both databases, the SDK's own chat model on the loopback provider).

Input guardrails run once per run on its input, before the first model request (a tripped one costs
no request); output guardrails once on the final output. Each result is recorded with the step's
reply (the ``helix.reply`` record and a ``guardrail`` event); a tripwire fails the run typed
``guardrail_tripped`` with the guardrail's name and output info, in the run, the API and the CLI.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pydantic
import sqlalchemy as sa
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from openai import AsyncOpenAI

import helix_dbos as hx
from helix_dbos.cli.render import describe
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.ledger.names import REPLY_TX
from tests.support.provider_server import Calls, ProviderServer, Status, Text, provider_server

SEEN: list[tuple[str, Any]] = []


class Verdict(pydantic.BaseModel):
    city: str
    safe: bool


@input_guardrail
def no_secrets(ctx: RunContextWrapper[Any], agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
    SEEN.append(("no_secrets", given))
    return GuardrailFunctionOutput(output_info={"checked": given, "found": "secret" in str(given)}, tripwire_triggered="secret" in str(given))


@input_guardrail(name="polite", run_in_parallel=False)
async def polite(ctx: RunContextWrapper[Any], agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
    SEEN.append(("polite", given))
    return GuardrailFunctionOutput(output_info="ok", tripwire_triggered=False)


@output_guardrail
def no_danger(ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> GuardrailFunctionOutput:
    SEEN.append(("no_danger", output))
    unsafe = (isinstance(output, Verdict) and not output.safe) or output == "danger"
    return GuardrailFunctionOutput(output_info={"unsafe": unsafe, "kind": type(output).__name__}, tripwire_triggered=unsafe)


@hx.openai_policy(replay="safe")
@function_tool
def lookup(city: str) -> str:
    """Look a city up."""
    SEEN.append(("lookup", city))
    return f"{city}: quiet"


def _model(server: ProviderServer) -> Any:
    return OpenAIChatCompletionsModel("gpt-4o", openai_client=AsyncOpenAI(api_key="test-key", base_url=server.url))


def _guarded(server: ProviderServer, name: str, **kw: Any) -> Agent[Any]:
    return Agent(name=name, model=_model(server), tools=[lookup], input_guardrails=[no_secrets, polite], output_guardrails=[no_danger], **kw)


def _recorded_checks(db_url: str, run_id: str) -> list[list[dict[str, Any]]]:
    """The checks each recorded reply of the run holds (the ``helix.reply#k`` records, in order)."""
    engine = create_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(t.tx_outputs.c.op, t.tx_outputs.c.output).where(t.tx_outputs.c.workflow_id == run_id)).all()
    finally:
        engine.dispose()
    replies = sorted((int(op.split("#")[1]), out) for op, out in rows if op.startswith(f"{REPLY_TX}#"))
    return [(out if isinstance(out, dict) else json.loads(out)).get("checks", []) for _, out in replies]


def test_guardrails_run_once_on_the_input_and_the_final_output_and_are_recorded(make_runtime: Any, db_url: str) -> None:
    """A run of two steps (a tool, then the structured output): each input guardrail ran once, on
    the run's input, before the first request; the output guardrail once, on the ``Verdict`` object;
    each result recorded with its step's reply and shown as a ``guardrail`` event."""
    with provider_server() as server:
        rt = make_runtime([_guarded(server, "guarded", output_type=Verdict)])
        SEEN.clear()
        server.script(Calls([("lookup", {"city": "Oslo"})]), Calls([("final_result", {"city": "Oslo", "safe": True})]))
        result = rt.start("guarded", "is Oslo safe?").result(timeout=120)
        assert (result.status, result.output) == ("completed", {"city": "Oslo", "safe": True}), result
        assert [s for s in SEEN if s[0] != "lookup"] == [("no_secrets", "is Oslo safe?"), ("polite", "is Oslo safe?"),
                                                         ("no_danger", Verdict(city="Oslo", safe=True))], SEEN
        first, last = _recorded_checks(db_url, result.run_id)
        assert first == [{"stage": "input", "guardrail": "no_secrets", "tripwire": False, "output_info": {"checked": "is Oslo safe?", "found": False}},
                         {"stage": "input", "guardrail": "polite", "tripwire": False, "output_info": "ok"}]
        assert last == [{"stage": "output", "guardrail": "no_danger", "tripwire": False, "output_info": {"unsafe": False, "kind": "Verdict"}}]
        events = [e for e in rt.reader.events(result.session_id).events if e["type"] == "guardrail"]
        assert [(e["data"]["step"], e["data"]["guardrail"]) for e in events] == [(0, "no_secrets"), (0, "polite"), (1, "no_danger")]
        assert describe(events[1], {}) == "input guardrail polite (step 0): passed ok"  # as helix-dbos show prints it

        # the session's next turn is new input: checked again, once
        SEEN.clear()
        server.script(Calls([("final_result", {"city": "Bergen", "safe": True})]))
        again = rt.start("guarded", "and Bergen?", session_id=result.session_id).result(timeout=120)
        assert again.status == "completed", again
        assert [s[0] for s in SEEN] == ["no_secrets", "polite", "no_danger"] and SEEN[0][1] == "and Bergen?"


def test_a_request_asked_again_in_its_step_does_not_run_the_input_guardrails_again(make_runtime: Any) -> None:
    with provider_server() as server:
        agent = hx.from_openai_agents(_guarded(server, "retried"), model_retries=hx.ModelRetries(attempts=3, first_delay=0.1, jitter=0.0))
        rt = make_runtime([agent])
        SEEN.clear()
        server.script(Status(500), Text("fine"))
        result = rt.start("retried", "hello").result(timeout=120)
        assert (result.status, result.output) == ("completed", "fine"), result
        assert [s[0] for s in SEEN] == ["no_secrets", "polite", "no_danger"], SEEN


def test_an_input_tripwire_fails_the_run_typed_before_any_request(make_runtime: Any, db_url: str) -> None:
    with provider_server() as server:
        rt = make_runtime([_guarded(server, "tripped_in")])
        SEEN.clear()
        before = len(server.requests())
        result = rt.start("tripped_in", "my secret is 42").result(timeout=120)
        assert (result.status, result.error_code) == ("failed", "guardrail_tripped"), result
        assert "input guardrail 'no_secrets' tripped" in (result.error or "") and '"found": true' in (result.error or ""), result.error
        assert len(server.requests()) == before, "a tripped input guardrail costs no model request"
        assert [s[0] for s in SEEN] == ["no_secrets", "polite"]


def test_an_output_tripwire_fails_the_run_typed_in_the_run_the_api_and_the_cli(db_url: str) -> None:
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from helix_dbos.cli.main import app as cli
    from helix_dbos.service.app import create_app

    with provider_server() as server:
        rt = hx.Runtime([_guarded(server, "tripped_out")], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")
        server.script(Text("danger"))
        with TestClient(create_app(rt), base_url="http://127.0.0.1") as client:
            started = client.post("/sessions", json={"agent": "tripped_out", "message": "go"})
            assert started.status_code == 202, started.text
            run_id, session_id = started.json()["run_id"], started.json()["session_id"]
            deadline = time.monotonic() + 120
            while (run := client.get(f"/runs/{run_id}").json())["status"] not in ("failed", "completed"):
                assert time.monotonic() < deadline, run
                time.sleep(0.2)
            result = rt.wait_run(run_id, timeout=60)
        assert run["error_code"] == "guardrail_tripped" and "output guardrail 'no_danger' tripped" in run["error"], run
        assert '"unsafe": true' in run["error"], run
        assert (result.error_code, result.error) == (run["error_code"], run["error"])
        shown = CliRunner().invoke(cli, ["show", session_id, "--db", db_url, "--json"])
        assert shown.exit_code == 0, shown.output
        runs = json.loads(shown.stdout)["session"]["runs"]
        assert [(r["error_code"], "no_danger" in r["error"]) for r in runs] == [("guardrail_tripped", True)], runs
